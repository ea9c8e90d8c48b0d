"""`program` (the `toolpipe` script) skips the interpreter's teardown (0.55 s of CPU after a
`serve`) and ends otherwise as a normal exit would, for what a user's app leaves. The review's
three repros (cff202d lost an exit handler's output, a pool's work, and hung on a process
pool) are the last three tests."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

_RUN = """
import sys
sys.argv = ["toolpipe", "show", "0" * 32]
from toolpipe.infra.cli.entry import program
program()
"""


def _program(tmp_path: Path, before: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """`program` in a fresh interpreter, after `before` (the app's own code), stdout a pipe."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TOOLPIPE_", "PYTEST_")) and k != "PYTHONUNBUFFERED"
    }
    child = subprocess.Popen(
        [sys.executable, "-c", before + _RUN, str(tmp_path)],
        env={**env, "TOOLPIPE_HOME": str(tmp_path / "home")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a pool's worker left behind is killed with it
    )
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {timeout:g} s after its command ended")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


def test_exit_handlers_run_threads_are_waited_for_and_no_teardown_runs(tmp_path: Path) -> None:
    before = """
import atexit, sys, threading, time, weakref
from pathlib import Path
folder = Path(sys.argv[1])
class Kept:
    def __del__(self):
        (folder / "teardown").write_text("ran")
kept = Kept()
weakref.finalize(kept, (folder / "finalized").write_text, "ran")
atexit.register(lambda: (folder / "atexit").write_text("ran"))
def late():
    time.sleep(0.3)
    (folder / "thread").write_text("ran")
threading.Thread(target=late).start()
sys.stdout.write("buffered, not flushed")
"""
    done = _program(tmp_path, before)
    assert done.stdout == "buffered, not flushed", done.stderr
    assert done.returncode == 1 and "no runs here" in done.stderr, done.stderr  # the command's own
    ran = sorted(p.name for p in tmp_path.iterdir() if p.is_file())
    assert ran == ["atexit", "finalized", "thread"]  # Kept's __del__ never ran: no teardown


def test_what_an_exit_handler_prints_reaches_a_piped_stdout(tmp_path: Path) -> None:
    done = _program(tmp_path, "import atexit\natexit.register(print, 'said at exit')\n")
    assert done.returncode == 1 and "no runs here" in done.stderr, done.stderr
    assert done.stdout == "said at exit\n"


def test_work_a_thread_pool_was_given_in_a_daemon_thread_is_done_before_the_exit(tmp_path: Path) -> None:
    """A normal exit joins every ThreadPoolExecutor's workers (threading's own exit hooks), even
    a daemon thread's (its workers are daemons too, as an app reloaded by `serve` makes them)."""
    before = """
import sys, threading, time, concurrent.futures
from pathlib import Path
folder = Path(sys.argv[1])
def later():
    time.sleep(0.3)
    (folder / "done").write_text("x")
pools = []  # the app's, kept as a module's global keeps it
def start():
    pools.append(concurrent.futures.ThreadPoolExecutor(1))
    pools[0].submit(later)
t = threading.Thread(target=start, daemon=True)
t.start()
t.join()
"""
    done = _program(tmp_path, before)
    assert done.returncode == 1, done.stderr
    assert (tmp_path / "done").exists()


def test_a_process_pool_first_used_in_a_daemon_thread_does_not_keep_the_program_alive(
    tmp_path: Path,
) -> None:
    """Its workers wait for the word to stop that threading's exit hook sends; multiprocessing's
    exit handler joins them: without that hook, forever (`serve` after a reload hung so)."""
    before = """
import threading, concurrent.futures
pools = []  # the app's, kept as a module's global keeps it
def start():
    pools.append(concurrent.futures.ProcessPoolExecutor(1))
    pools[0].submit(abs, 1).result()
t = threading.Thread(target=start, daemon=True)
t.start()
t.join()
"""
    done = _program(tmp_path, before, timeout=20)
    assert done.returncode == 1 and "no runs here" in done.stderr, done.stderr
