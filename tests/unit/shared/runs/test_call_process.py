"""Parts of a process per call (issue 32) a hostile call went after: the folder it locked, an
answer too long to take."""

import inspect
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from toolpipe.shared.messages import ToolCall
from toolpipe.shared.runs import call_runner
from toolpipe.shared.runs.tool_run import ToolRunRequest

ROOT = Path(__file__).resolve().parents[4]
# `nobody` may not be able to read the checkout (a clone in a 0700 `mktemp -d` folder), so it
# runs the function's own source with the base interpreter, not toolpipe imported from here.
_REMOVE = (
    "import contextlib, os, shutil, sys\n"
    + inspect.getsource(call_runner.remove_tree)
    + "remove_tree(sys.argv[1])\n"
)


def _python_for_nobody() -> str:
    """An interpreter `nobody` can run, with a standard library it can read: this one's base,
    unless it sits in a folder only its owner may enter (pyenv or uv under a 0700 home) and finds
    no other library, else the system's."""
    candidates = [os.path.realpath(getattr(sys, "_base_executable", sys.executable)), "/usr/bin/python3"]
    for python in candidates:
        check = "import contextlib, os, shutil, sys"  # what remove_tree's source needs
        if (
            os.path.exists(python)
            and subprocess.run(_as_nobody([python, "-I", "-c", check]), capture_output=True).returncode == 0
        ):
            return python
    pytest.fail(f"no Python that user nobody can run: tried {', '.join(candidates)}")


def _as_nobody(command: list[str]) -> list[str]:
    """As Lambda runs code, not as root (root reads and removes whatever the mode says)."""
    if os.geteuid() != 0:
        return command
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("running as root, without setpriv to run as another user")
    return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *command]


def test_a_folder_a_call_locked_is_removed_with_what_is_in_it() -> None:
    base = Path(tempfile.mkdtemp(prefix="toolpipe-test-"))  # under /tmp, as a call's folder is
    os.chmod(base, 0o777)
    folder = base / "call"
    locked = folder / "locked" / "deeper"
    script = (
        "import os, sys; f = sys.argv[1]; os.makedirs(f + '/locked/deeper');"
        " open(f + '/locked/deeper/note', 'w').write('x'); os.chmod(f + '/locked/deeper', 0);"
        " os.chmod(f + '/locked', 0); os.symlink('/etc', f + '/link')"
    )
    python = _python_for_nobody()
    subprocess.run(_as_nobody([python, "-I", "-c", script, str(folder)]), check=True)
    assert not os.access(locked, os.R_OK) or os.geteuid() == 0
    subprocess.run(_as_nobody([python, "-I", "-c", _REMOVE, str(folder)]), check=True)
    assert not folder.exists()
    assert Path("/etc/passwd").exists()  # the link was removed, never followed
    base.rmdir()


def test_an_answer_over_the_limit_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(call_runner, "ANSWER_LIMIT_BYTES", 1000)
    monkeypatch.setenv("TOOLPIPE_APP", "tests.e2e.process_app")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    processes = call_runner.CallProcesses.spawned(dict(os.environ))
    request = ToolRunRequest(
        run_id="r",
        agent="prober",
        call=ToolCall(id="c", name="shout", arguments='{"megabytes": 0}'),
        idempotency_key="k",
        time_limit=30,
    )
    try:
        answer, end = processes.run(request, 30)  # the answer itself is small: under the limit
        assert answer is not None and answer.content == "shouted"
        monkeypatch.setattr(call_runner, "ANSWER_LIMIT_BYTES", 10)
        answer, end = processes.run(request, 30)
    finally:
        processes.close()
    assert answer is None
    assert end.describe().startswith("its answer was ") and end.describe().endswith("over the runner's 10")


_APP = '''
import time

from toolpipe import Agent, tool


@tool
def word(seconds: float) -> str:
    """Say the word, after a while.

    Args:
        seconds: How long to wait first.
    """
    time.sleep(seconds)
    return "WORD"


speaker = Agent(name="speaker", instructions="Speak.", tools=[word])
'''


def test_a_renewed_template_lets_its_call_finish_and_the_next_call_runs_the_new_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`toolpipe serve` renews the templates when the app changes (issue 33): a call in progress
    finishes with the code it started with, the next one imports the new code; each says which
    version of the app ran it."""
    import threading

    package = tmp_path / "renewapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "agents.py").write_text(_APP.replace("WORD", "old"))
    monkeypatch.setenv("TOOLPIPE_APP", "renewapp.agents")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT)]))
    processes = call_runner.CallProcesses.spawned(dict(os.environ))

    def request(seconds: float) -> ToolRunRequest:
        arguments = f'{{"seconds": {seconds}}}'
        return ToolRunRequest(
            run_id="r", agent="speaker", call=ToolCall(id="c", name="word", arguments=arguments),
            idempotency_key="k", time_limit=30,
        )  # fmt: skip

    answers: list[object] = []
    try:
        assert (first := processes.run(request(0), 30)[0]) is not None and first.content == "old"
        slow = threading.Thread(target=lambda: answers.append(processes.run(request(1.5), 30)))
        slow.start()
        time.sleep(0.5)  # the slow call is in its process
        (package / "agents.py").write_text(_APP.replace("WORD", "new"))
        processes.renew()
        new, _ = processes.run(request(0), 30)
        slow.join(timeout=30)
    finally:
        processes.close()
    (old, end) = answers[0]  # type: ignore[misc]
    assert end.how == "exited" and old is not None and old.content == "old"
    assert new is not None and new.content == "new"
    assert old.app_version == first.app_version != new.app_version
    assert new.app_version is not None


def test_a_spare_whose_process_was_sent_sigkill_but_has_not_died_yet_is_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`kill` returns once SIGKILL is pending; on a busy machine the process dies only when it
    next runs, maybe after the next call was handed to it (seen in CI: that call failed, killed).
    Such a process is alive to `waitpid`; its pending SIGKILL, in /proc, makes it unfit. The
    kernel's window cannot be held open from a test, so the status file says it is."""
    import builtins
    import io
    import signal

    from toolpipe.shared.runs import call_process

    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    try:
        assert call_process._fit(pid)  # alive, nothing pending
        real_open = builtins.open
        pending = f"Name:\tpython\nSigPnd:\t0000000000000000\nShdPnd:\t{1 << (signal.SIGKILL - 1):016x}\n"

        def status(path: object, *args: object, **kwargs: object) -> object:
            if path == f"/proc/{pid}/status":
                return io.StringIO(pending)
            return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr(builtins, "open", status)
        assert not call_process._fit(pid)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
