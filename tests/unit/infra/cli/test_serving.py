"""`toolpipe serve`'s signals: Ctrl-C drains, a second one hurries, and neither can hang it."""

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from toolpipe.infra.cli.serving import SignalFlag

ROOT = Path(__file__).resolve().parents[4]

# The main thread waits on the flags the way the serve loop does, as often as it can: a signal
# then mostly lands while it is inside `wait`. With a `threading.Event`, whose `set()` takes the
# lock its `wait()` holds, 9 of 10 such processes hung for good at the first signal.
_WAITS_THROUGH_SIGNALS = textwrap.dedent(
    """
    import os, signal, threading, time
    from toolpipe.infra.cli.serving import stop_events

    for _ in range(3):
        stop, hurry = stop_events()

        def send():
            for sig in (signal.SIGINT, signal.SIGTERM):
                time.sleep(0.1)
                os.kill(os.getpid(), sig)

        threading.Thread(target=send, daemon=True).start()
        while not stop.wait(0):
            pass
        while not hurry.wait(0):
            pass
    print("stopped and hurried 3 times")
    """
)


def test_a_signal_landing_while_the_main_thread_waits_on_its_flag_never_hangs_the_server() -> None:
    done = _script(_WAITS_THROUGH_SIGNALS, timeout=30)  # killed then, and the test fails: it hung
    assert done.stdout == "stopped and hurried 3 times\n"


def test_a_flag_waits_its_timeout_then_answers_at_once_once_set() -> None:
    flag = SignalFlag()
    assert flag.wait(0.02) is False and not flag.is_set()
    flag.set()
    assert flag.wait(60) is True and flag.is_set()


def test_a_flag_set_meanwhile_ends_a_long_wait_at_once() -> None:
    flag = SignalFlag()
    threading.Timer(0.1, flag.set).start()
    started = time.monotonic()
    assert flag.wait(60) is True
    assert time.monotonic() - started < 10


_A_SIGNAL_ENDS_A_LONG_WAIT = textwrap.dedent(
    """
    import os, signal, threading, time
    from toolpipe.infra.cli.serving import stop_events

    stop, hurry = stop_events()
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
    started = time.monotonic()
    print(stop.wait(30), not hurry.is_set(), time.monotonic() - started < 10)
    """
)


def test_a_signal_ends_a_long_wait_at_once() -> None:
    """The main thread asleep in the flag's wait: the signal's handler runs, and the wait ends
    then, not when its time is up."""
    done = _script(_A_SIGNAL_ENDS_A_LONG_WAIT)
    assert done.stdout == "True True True\n"


_A_SIGNAL_GIVEN_TO_ANOTHER_THREAD_ENDS_THE_WAIT = textwrap.dedent(
    """
    import os, signal, threading, time
    from toolpipe.infra.cli.serving import stop_events

    stop, hurry = stop_events()
    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()  # takes signals
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the kernel gives it to that thread
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
    started = time.monotonic()
    print(stop.wait(30), time.monotonic() - started < 10)
    """
)


def test_a_signal_the_kernel_gives_another_thread_ends_the_wait_too() -> None:
    """Python runs the handler in the main thread, asleep in the flag's wait: woken through
    `signal.set_wakeup_fd`, not when its time is up."""
    done = _script(_A_SIGNAL_GIVEN_TO_ANOTHER_THREAD_ENDS_THE_WAIT)
    assert done.stdout == "True True\n"


def test_a_flag_waits_forever_or_not_at_all_when_asked() -> None:
    flag = SignalFlag()
    assert flag.wait(0) is False and flag.wait(-1) is False
    threading.Timer(0.1, flag.set).start()
    assert flag.wait(float("inf")) is True


def _script(code: str, timeout: float = 60) -> "subprocess.CompletedProcess[str]":
    """`code` run by a fresh interpreter (signals, handlers and masks of its own); it must end well."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    return done
