"""Tool runners' templates forked from the fork server (infra/local/fork_server.py): each is what
a fresh interpreter with the runner's environment is, the server keeps no runner's settings and
cannot be attached to, and one that was killed or stopped is replaced, the template started
afresh meanwhile."""

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.local import fork_server
from toolpipe.shared.messages import ToolCall
from toolpipe.shared.runs import call_runner
from toolpipe.shared.runs.tool_run import ToolRunRequest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not fork_server.usable(), reason="the fork server needs Linux's pidfds")

_APP = '''
import json, os, sys

from toolpipe import Agent, tool


@tool
def describe() -> str:
    """Say what this process is."""
    return json.dumps({
        "environ": dict(os.environ),
        "path": sys.path,
        "argv0": sys.argv[0],
        "stdin": os.readlink("/proc/self/fd/0"),
        "flags": repr(sys.flags),
        "warnoptions": sys.warnoptions,
        "dumpable": __import__("ctypes").CDLL(None).prctl(3, 0, 0, 0, 0),
    })


@tool
def holds(prefix: str, digest: str) -> str:
    """Whether this process's memory holds the 64 characters from `prefix` whose SHA-256 is
    `digest` (never the text itself: this call's own arguments would hold it).

    Args:
        prefix: What the text starts with.
        digest: The text's SHA-256, in hex.
    """
    import hashlib, re

    start = prefix.encode()
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", buffering=0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("r") or line.rstrip().endswith(("[vvar]", "[vsyscall]")):
                continue
            low, high = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(low)
                data = mem.read(high - low)
            except OSError:
                continue
            for found in re.finditer(re.escape(start), data):
                if hashlib.sha256(data[found.start():found.start() + 64]).hexdigest() == digest:
                    return "held"
    return "not held"


describer = Agent(name="describer", instructions="Describe.", tools=[describe, holds])
'''


@pytest.fixture
def environment(tmp_path: Path) -> dict[str, str]:
    """A runner's environment as `tool_processes.environment` makes it (a broker's path that is
    never called here, the runner's own settings)."""
    (tmp_path / "describer_app.py").write_text(_APP)
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLPIPE_", "AWS_", "OPENAI_"))}
    return {
        **kept,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "TOOLPIPE_APP": "describer_app",
        "TOOLPIPE_LOCAL_AWS": str(tmp_path / "no-broker"),
        "TOOLPIPE_TABLE_NAME": "the-runners-own-setting",
        "AWS_ACCESS_KEY_ID": "tool-runner",
    }


@pytest.fixture(autouse=True)
def own_server() -> Iterator[None]:
    """Each test with a server of its own, ended after it."""
    fork_server._close_server()
    fork_server._server = None
    yield
    fork_server._close_server()
    fork_server._server = None


def _answer(processes: call_runner.CallProcesses, tool: str, **arguments: str) -> str:
    call = ToolCall(id="c", name=tool, arguments=json.dumps(arguments))
    request = ToolRunRequest(run_id="r", agent="describer", call=call, idempotency_key="k", time_limit=30)
    answer, end = processes.run(request, 30)
    assert answer is not None, end.describe() + end.output.decode()
    return answer.content


def _described(processes: call_runner.CallProcesses) -> dict[str, Any]:
    described: dict[str, Any] = json.loads(_answer(processes, "describe"))
    return described


def _noting(parents: list[int], started: Callable[[int], None]) -> Callable[[int], None]:
    """`started`, noting each template's parent as it starts (it is alive then)."""

    def note(pid: int) -> None:
        parents.append(_parent(pid))
        started(pid)

    return note


def _forked_processes(environment: dict[str, str], parents: list[int]) -> call_runner.CallProcesses:
    return call_runner.CallProcesses.started_by(
        lambda started: fork_server.start_template(environment, _noting(parents, started))
    )


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return int(stat.read().rsplit(b")", 1)[1].split()[1])


@pytest.mark.parametrize("safe_path", [False, True], ids=["", "PYTHONSAFEPATH"])
def test_a_forked_template_is_what_a_fresh_interpreter_is(
    environment: dict[str, str], safe_path: bool
) -> None:
    """Under PYTHONSAFEPATH a fresh `-m` puts no folder of its own first on sys.path; nor does a
    forked one."""
    if safe_path:
        environment = {**environment, "PYTHONSAFEPATH": "1"}
    fresh_parents: list[int] = []
    forked_parents: list[int] = []
    fresh = call_runner.CallProcesses.started_by(
        lambda started: call_runner.spawn(
            environment, None, fork_server.HOST_MODULE, _noting(fresh_parents, started)
        )
    )
    forked = _forked_processes(environment, forked_parents)
    try:
        seen_fresh, seen_forked = _described(fresh), _described(forked)
        # Forked from the server, not started by this process: the server's settings are the
        # template's less the runner's own, and the server cannot be attached to.
        server = forked_parents[0]
        assert fresh_parents == [os.getpid()] and server != os.getpid()
        with open(f"/proc/{server}/cmdline", "rb") as command:
            assert command.read().split(b"\0")[1:3] == [b"-c", fork_server._BOOTSTRAP.encode()]
        try:
            with open(f"/proc/{server}/environ", "rb") as read:
                names = {entry.split(b"=", 1)[0].decode() for entry in read.read().split(b"\0") if entry}
            assert not {n for n in names if n.startswith(("TOOLPIPE_", "AWS_", "OPENAI_"))}
            assert "PYTHONPATH" in names
        except PermissionError:
            assert os.geteuid() != 0  # not dumpable: only root reads it
    finally:
        fresh.close()
        forked.close()
    for seen in (seen_fresh, seen_forked):
        for name in ("TMPDIR", "TEMP", "TMP"):  # each call's own folder
            seen["environ"].pop(name, None)
    assert seen_forked["environ"] == seen_fresh["environ"]
    assert seen_forked["environ"]["TOOLPIPE_TABLE_NAME"] == "the-runners-own-setting"
    # Its own folder first (but under PYTHONSAFEPATH), then what a fresh interpreter has.
    first = 0 if safe_path else 1
    assert Path(seen_forked["path"][0]).name.startswith("toolpipe-runner-") != safe_path
    assert seen_forked["path"][first:] == seen_fresh["path"][first:]
    for key in ("argv0", "stdin", "flags", "warnoptions", "dumpable"):
        assert seen_forked[key] == seen_fresh[key], key
    assert seen_forked["stdin"] == "/dev/null" and seen_forked["dumpable"] == 0


def test_the_fork_server_is_not_dumpable_before_it_imports_anything_of_toolpipe(tmp_path: Path) -> None:
    """A tool process of the same user cannot attach to it (not root: root attaches to anything),
    not even while it imports: its command makes it not dumpable first, then runs its module."""
    (tmp_path / "probe.py").write_text(
        "import ctypes, sys\n"
        "print(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0), any(m.startswith('toolpipe') for m in sys.modules))\n"
    )
    bootstrap = fork_server._BOOTSTRAP.replace(repr(fork_server._SERVER_MODULE), repr("probe"))
    assert bootstrap != fork_server._BOOTSTRAP
    done = subprocess.run(
        [sys.executable, "-c", bootstrap],
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == ["0", "False"], done.stderr


@pytest.mark.parametrize("how", ["killed", "stopped"])
def test_a_server_a_tool_killed_or_stopped_is_replaced_and_templates_still_start(
    environment: dict[str, str], how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tool code runs as the developer's user: it can signal the server. The next template is
    not the old server's (started afresh, after `ANSWER_SECONDS` for one that does not answer, or
    by a new server), and the server after it forks again; the old one is ended."""
    parents: list[int] = []
    first = _forked_processes(environment, parents)
    try:
        _described(first)
        server = parents[0]
        assert server != os.getpid()  # forked, by a server that started within START_SECONDS
        monkeypatch.setattr(fork_server, "ANSWER_SECONDS", 1.0)
        os.kill(server, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
        for _ in range(2):
            processes = _forked_processes(environment, parents)
            try:
                _described(processes)
            finally:
                processes.close()
        assert parents[1] != server
        assert parents[2] not in (os.getpid(), server)  # forked by a new server
        assert not Path(f"/proc/{server}").exists()  # ended and reaped
        _described(first)  # the first template goes on serving calls without its server
    finally:
        first.close()


def test_a_template_started_after_the_settings_changed_gets_a_server_with_them(
    environment: dict[str, str],
) -> None:
    """Python reads some settings only as it starts (`PYTHON*`, the locale): a server is started
    with the template's, never one forked with others'."""
    parents: list[int] = []
    first = _forked_processes(environment, parents)
    changed = {**environment, "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    second = _forked_processes(changed, parents)
    try:
        assert _described(first)["environ"].get("PYTHONWARNINGS") is None
        seen = _described(second)
        assert seen["warnoptions"] == ["ignore::DeprecationWarning"]  # read as Python started
        assert parents[1] != parents[0]
    finally:
        first.close()
        second.close()


def test_a_template_inherits_nothing_of_the_templates_forked_before_it(environment: dict[str, str]) -> None:
    """The server reads each request (a runner's settings, its broker's path) into one buffer and
    zeroes it once the template is forked: a later template's calls, of another runtime, find
    none of it in their memory, even where that request was longer than theirs."""
    import hashlib
    import uuid

    secret = f"first-runtime-{uuid.uuid4().hex}".ljust(64, "x")
    digest = hashlib.sha256(secret.encode()).hexdigest()
    first_env = {**environment, "TOOLPIPE_PADDING": "p" * 4000, "TOOLPIPE_FIRST": secret}
    first = _forked_processes(first_env, [])
    try:
        assert _answer(first, "holds", prefix="first-runtime-", digest=digest) == "held"  # its own
        second = _forked_processes(environment, [])
        try:
            assert _answer(second, "holds", prefix="first-runtime-", digest=digest) == "not held"
        finally:
            second.close()
    finally:
        first.close()


def test_a_forked_template_imports_the_app_only_once_the_runtime_has_its_pid(
    environment: dict[str, str], tmp_path: Path
) -> None:
    """The broker answers the runner's processes only (`holds`: the pids the runtime was told):
    an app that calls AWS as it is imported must be one of them by then, however slowly the
    runtime's thread gets to note it."""
    import time

    mark = tmp_path / "imported"
    (tmp_path / "marking_app.py").write_text(
        f"from pathlib import Path\nPath({str(mark)!r}).write_text('imported')\n" + _APP
    )
    seen: list[bool] = []

    def slowly(started: Callable[[int], None]) -> Callable[[int], None]:
        def note(pid: int) -> None:
            time.sleep(0.5)  # a runtime busy with its other threads
            seen.append(mark.exists())
            started(pid)

        return note

    marking = {**environment, "TOOLPIPE_APP": "marking_app"}
    processes = call_runner.CallProcesses.started_by(
        lambda started: fork_server.start_template(marking, slowly(started))
    )
    try:
        _described(processes)
    finally:
        processes.close()
    assert seen == [False] and mark.exists()


def test_a_request_too_large_for_one_message_starts_afresh_and_keeps_the_server(
    environment: dict[str, str],
) -> None:
    """A runner's environment past `REQUEST_LIMIT_BYTES` (one message of the server's socket; each
    variable under the 128 KiB `execve` takes)."""
    parents: list[int] = []
    third = fork_server.REQUEST_LIMIT_BYTES // 3 + 1
    large = {**environment, **{f"TOOLPIPE_LARGE_{n}": "x" * third for n in range(3)}}
    for env in (environment, large, environment):
        processes = _forked_processes(env, parents)
        try:
            assert _described(processes)["environ"].get("TOOLPIPE_LARGE_2") == env.get("TOOLPIPE_LARGE_2")
        finally:
            processes.close()
    server = parents[0]
    assert server != os.getpid() and parents[1:] == [os.getpid(), server]


def test_templates_whose_other_settings_differ_share_a_server_and_each_has_its_own(
    environment: dict[str, str],
) -> None:
    """Only what Python and the server's imports read as they start decide the server: pytest's
    per-test variable, a developer's or a runner's own setting are each template's alone."""
    parents: list[int] = []
    seen = []
    for n in range(2):
        env = {**environment, "PYTEST_CURRENT_TEST": f"test {n}", "TOOLPIPE_TABLE_NAME": f"table-{n}"}
        processes = _forked_processes(env, parents)
        try:
            seen.append(_described(processes)["environ"])
        finally:
            processes.close()
    assert parents[0] == parents[1] != os.getpid()
    assert [(e["PYTEST_CURRENT_TEST"], e["TOOLPIPE_TABLE_NAME"]) for e in seen] == [
        ("test 0", "table-0"),
        ("test 1", "table-1"),
    ]
    try:
        with open(f"/proc/{parents[0]}/environ", "rb") as read:
            names = {entry.split(b"=", 1)[0].decode() for entry in read.read().split(b"\0") if entry}
    except PermissionError:
        assert os.geteuid() != 0  # not dumpable: only root reads it
    else:
        assert names == set(fork_server._startup_settings(environment))
        assert "PYTEST_CURRENT_TEST" not in names and "PATH" in names
