"""A tool process's AWS calls, as the runtime's broker takes them (issue 32): what a tool sends
arrives as sent, and a tool cannot use the broker to exhaust the runtime."""

import datetime
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolpipe.infra.local import aws_broker, aws_forwarding
from toolpipe.infra.local.caller import FunctionContext
from toolpipe.infra.local.iam import Policy


@pytest.mark.parametrize(
    "params",
    [
        {"Metadata": {"__datetime__": "2026-01-01T00:00:00"}},
        {"Item": {"__bytes__": "not base64 at all"}},
        {"Item": {"__dict__": {"__bytes__": "x"}}},
        {"Body": b"\x00\xff", "When": datetime.datetime(2026, 1, 1, 12, 0), "Nested": [{"a": b"b"}]},
    ],
)
def test_what_a_tool_sends_arrives_as_sent(params: dict[str, object]) -> None:
    sent = json.loads(json.dumps(aws_forwarding.encode(params)))
    assert aws_forwarding.decode(sent) == params


@pytest.fixture
def broker() -> Iterator[aws_broker.AwsBroker]:
    context = FunctionContext(
        name="runner", environment={}, policy=Policy(role_arn="arn:aws:iam::1:role/r", documents=())
    )
    with aws_broker.AwsBroker(context) as broker:
        yield broker


def test_a_region_that_is_not_one_is_refused(broker: aws_broker.AwsBroker) -> None:
    request = {"service": "s3", "region": "x" * 5000, "operation": "ListBuckets", "params": {}}
    answer = broker.call(json.dumps(request).encode())
    assert answer["failure"].startswith("a request the local AWS cannot read: ValueError:")


def test_connections_past_the_bound_are_closed_at_once(broker: aws_broker.AwsBroker) -> None:
    held = []
    for _ in range(aws_broker.CONNECTIONS):
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(broker.path)
        held.append(connection)
    time.sleep(0.2)  # the broker took each, and holds a thread for each
    extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    extra.connect(broker.path)
    extra.settimeout(5)
    assert extra.recv(1) == b""  # closed: no thread, no buffer for it
    for connection in held:
        connection.close()
    extra.close()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary folder with a short path: a socket's path stops at 107 bytes (pytest's
    tmp_path under an xdist worker is longer than that with the broker's names)."""
    folder = Path(tempfile.mkdtemp(prefix="tp-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_broker_removes_the_folders_of_runtimes_that_were_killed(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime killed (kill -9, a crash) leaves its brokers' folders, whose `alive` lock the
    kernel dropped: the next broker removes those, and nothing else: not a folder whose lock a
    live process holds (a runtime in another PID namespace, whose pid means nothing here), one
    being made (no `alive` yet), another kind of file or a link, or any name at all."""
    tmp_path = short_tmp
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    killed = tmp_path / f"{aws_broker.FOLDER_PREFIX}4000000-k1ll3d"
    killed.mkdir()
    (killed / aws_broker.ALIVE).write_text("")
    (killed / "aws.sock").write_bytes(b"")
    elsewhere = tmp_path / f"{aws_broker.FOLDER_PREFIX}403-n4m3sp4c3"  # pid 403 of another namespace
    elsewhere.mkdir()
    (elsewhere / aws_broker.ALIVE).write_text("")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys; f = open(sys.argv[1]); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()",
            str(elsewhere / aws_broker.ALIVE),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        making = tmp_path / f"{aws_broker.FOLDER_PREFIX}1-m4k1ng"  # no `alive` yet
        making.mkdir()
        odd = tmp_path / f"{aws_broker.FOLDER_PREFIX}99999999999999999999-x"  # any name: no pid is read
        odd.mkdir()
        target = tmp_path / "target"
        target.mkdir()
        (target / aws_broker.ALIVE).write_text("")
        (tmp_path / f"{aws_broker.FOLDER_PREFIX}2-link").symlink_to(target)
        (tmp_path / f"{aws_broker.FOLDER_PREFIX}3-file").write_text("not a folder")

        context = FunctionContext(
            name="runner", environment={}, policy=Policy(role_arn="arn:aws:iam::1:role/r", documents=())
        )
        with aws_broker.AwsBroker(context) as broker:
            own = Path(broker.path).parent
            assert own.parent == tmp_path and own.name.startswith(aws_broker.FOLDER_PREFIX)
            assert not killed.exists()
            assert (
                elsewhere.is_dir()
                and making.is_dir()
                and odd.is_dir()
                and (target / aws_broker.ALIVE).exists()
            )
            assert (tmp_path / f"{aws_broker.FOLDER_PREFIX}3-file").is_file()
            # A live broker's own folder is held: the next broker leaves it.
            with aws_broker.AwsBroker(context) as second:
                assert own.is_dir() and Path(second.path).parent != own
        assert not own.exists()
    finally:
        holder.communicate("")
    aws_broker.sweep_dead_folders()  # the holder has ended: its folder goes now
    assert not elsewhere.exists()
