"""What `toolpipe serve` checks and handles around the runtime: its ports, signals, and the
threads a tool may leave behind."""

import argparse
import contextlib
import os
import select
import signal
import socket
import sys
import threading
import time
from typing import Any, TextIO

from toolpipe.infra.cli.errors import EXIT_OK, CommandError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def aws_port(args: argparse.Namespace) -> int:
    """`--aws-port`, or the API port + 1 (a free one when the API port is chosen free)."""
    if args.aws_port is not None:
        return int(args.aws_port)
    return args.port + 1 if 0 < args.port < 65535 else 0


def check_ports(host: str, ports: list[tuple[str, int | None]]) -> None:
    """Refuse, before the runtime starts, an (option, port) it could not bind on `host`.

    Before the runtime starts: it would resume the folder's runs only to stop them. Port 0 too:
    a host that does not resolve or is not this machine's fails here.
    """
    for option, port in ports:
        if port is None:
            continue
        try:
            socket.create_server((host, port)).close()
        except OSError as e:
            reason = e.strerror or str(e)
            hint = f" ({option} 0 picks a free one)" if port else ""
            raise CommandError(f"cannot serve on {host}:{port}: {reason}{hint}") from None


class SignalFlag:
    """Set once by a signal handler, waited on by the main thread.

    Not a `threading.Event`: Python runs a signal handler in the main thread, between two of its
    bytecodes, and the main thread may then be inside that Event's own `wait()`, holding the
    lock `set()` takes (a plain one, not reentrant). Ctrl-C then hung `toolpipe serve` for good
    (seen once in the suite). A flag is set without any lock. Its waiter sleeps in `poll` on a
    socket that `set` writes to: a signal interrupts the poll, its handler runs and writes, and
    the poll, resumed (PEP 475), returns at once; so does one entered after the write. A signal
    the kernel gives another thread wakes it through `wake_on_signals`. (It slept in 10-ms steps
    before: 100 wake-ups a second, ~6 ms of CPU a second of an idle server.)
    """

    # The longest one sleep: `poll` takes milliseconds as a C int.
    LONGEST_SLEEP_SECONDS = 3600.0

    def __init__(self) -> None:
        self._set = False
        self._waiting, self._setting = socket.socketpair()
        self._waiting.setblocking(False)
        self._setting.setblocking(False)
        self._poll = select.poll()  # not select(): it refuses descriptors past 1,023
        self._poll.register(self._waiting, select.POLLIN)

    def set(self) -> None:
        self._set = True
        with contextlib.suppress(OSError):  # full (set many times before): readable already
            self._setting.send(b"\0")

    def wake_on_signals(self) -> None:
        """Wake the waiter on any signal, whichever thread the kernel gives it to: its handler
        then runs in the main thread (`signal.set_wakeup_fd`; from the main thread only)."""
        signal.set_wakeup_fd(self._setting.fileno(), warn_on_full_buffer=False)

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        """Whether the flag is set, once it is or `timeout` seconds have passed."""
        deadline = time.monotonic() + timeout
        while not self._set:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._poll.poll(min(left, self.LONGEST_SLEEP_SECONDS) * 1000)
            # What woke it is read away: a signal that set nothing must not keep it awake.
            with contextlib.suppress(OSError):
                while self._waiting.recv(4096):
                    pass
        return self._set


def stop_events() -> tuple[SignalFlag, SignalFlag]:
    """(stop, hurry), set by SIGINT and SIGTERM: the first drains (runs in progress end), a
    second one stops them now."""
    stop, hurry = SignalFlag(), SignalFlag()

    def on_signal(signum: int, frame: Any) -> None:
        (hurry if stop.is_set() else stop).set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    with contextlib.suppress(ValueError):  # not the main thread: its handlers are not ours either
        stop.wake_on_signals()
    return stop, hurry


def exit_past_stray_threads(err: TextIO) -> None:
    """Exit now if a tool left a thread of its own running (not a daemon, so the interpreter
    would wait for it forever): the state is saved and the lock released, nothing is lost."""
    stray = [t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()]
    if stray:
        err.write(
            f"toolpipe: leaving {len(stray)} thread(s) a tool started still running: {', '.join(stray[:5])}\n"
        )
        err.flush()
        sys.stdout.flush()
        os._exit(EXIT_OK)
