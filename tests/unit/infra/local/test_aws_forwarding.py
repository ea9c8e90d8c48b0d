"""A tool process's AWS calls, as the runtime's broker takes them (issue 32): what a tool sends
arrives as sent, and a tool cannot use the broker to exhaust the runtime."""

import datetime
import json
import os
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
    """A runtime killed (kill -9, a crash) leaves its brokers' folders: the next broker removes
    those of processes that have ended, and nothing else."""
    tmp_path = short_tmp
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(ended.stdout)
    left = tmp_path / f"{aws_broker.FOLDER_PREFIX}{dead_pid}-k1ll3d"
    left.mkdir()
    (left / "aws.sock").write_bytes(b"")
    kept = [
        tmp_path / f"{aws_broker.FOLDER_PREFIX}{os.getpid()}-l1v3",  # a runtime still running
        tmp_path / f"{aws_broker.FOLDER_PREFIX}unnamed",  # not one we name
        tmp_path / "elsewhere",
    ]
    for folder in kept:
        folder.mkdir()
    (tmp_path / f"{aws_broker.FOLDER_PREFIX}{dead_pid}-file").write_text("not a folder")

    context = FunctionContext(
        name="runner", environment={}, policy=Policy(role_arn="arn:aws:iam::1:role/r", documents=())
    )
    with aws_broker.AwsBroker(context) as broker:
        own = Path(broker.path).parent
        assert own.parent == tmp_path and own.name.startswith(f"{aws_broker.FOLDER_PREFIX}{os.getpid()}-")
        assert not left.exists()
        assert all(folder.is_dir() for folder in kept)
        assert (tmp_path / f"{aws_broker.FOLDER_PREFIX}{dead_pid}-file").is_file()
    assert not own.exists()
