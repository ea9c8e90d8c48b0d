"""Where a CLI process's logs go: the state folder's log file, never between its results.

A command that hosts the runtime in its own process (`toolpipe serve`, `toolpipe invoke`) runs
the real handlers, moto and the runtime's threads, and each of them writes to the terminal in
its own way: Powertools' `Logger` prints JSON lines to `sys.stdout` (a run that fails logs
one), the runtime's modules log through `logging` (with no handler configured, Python's
last-resort handler prints to `sys.stderr`), and a thread that dies prints its traceback to
`sys.stderr`. Inside `logs_to_file` all of that goes to `<state>/toolpipe.log` (and also to
the terminal's stderr with `--verbose`), so stdout holds only what the command was asked for.
"""

import contextlib
import logging
import sys
import traceback
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from toolpipe.infra.local.client import LOG_FILE

# The runtime's own modules log exceptions (ERROR) and warnings; Powertools' level is its own
# (POWERTOOLS_LOG_LEVEL, WARNING by default locally), set where its logger is made.
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_path(home: Path) -> Path:
    return home / LOG_FILE


class _Tee:
    """Writes to several text streams: the log file and, with `--verbose`, stderr. What the
    process's `sys.stdout` is while it lives: a tool that closes it closes nothing of ours."""

    def __init__(self, *streams: TextIO) -> None:
        self._streams = streams

    def write(self, text: str) -> int:
        for stream in self._streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self._streams:
            stream.flush()

    def close(self) -> None:
        pass  # the log file is the block's to close

    @property
    def closed(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._streams[0], name)


def _stream_handlers() -> Iterator[logging.StreamHandler[Any]]:
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for found in loggers:
        if isinstance(found, logging.Logger):
            for handler in found.handlers:
                if isinstance(handler, logging.StreamHandler) and not isinstance(
                    handler, logging.FileHandler
                ):
                    yield handler


@contextlib.contextmanager
def logs_to_file(home: Path, *, echo: TextIO | None = None) -> Iterator[Path]:
    """For the block, everything this process prints or logs outside the command's own output
    goes to the log file (and to `echo` too, when given); yields the file's path.

    The command keeps writing its results and messages to the stdout and stderr objects it held
    before the block: only `sys.stdout`/`sys.stderr` as libraries see them are replaced.
    """
    home.mkdir(parents=True, exist_ok=True)
    path = log_path(home)
    with path.open("a", encoding="utf-8", buffering=1) as file:
        sink: TextIO = _Tee(file) if echo is None else _Tee(file, echo)  # type: ignore[assignment]
        terminal = (sys.stdout, sys.stderr)
        # Loggers made before the block (Powertools' binds sys.stdout when it is first made)
        # write to the sink for its duration.
        moved = {h: h.stream for h in _stream_handlers() if h.stream in terminal}
        for handler in moved:
            handler.setStream(sink)
        to_file = logging.StreamHandler(sink)
        to_file.setFormatter(logging.Formatter(_FORMAT))
        root = logging.getLogger()
        root.addHandler(to_file)
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                yield path
        finally:
            root.removeHandler(to_file)
            # Loggers made inside the block hold the sink; the file closes now: back to the
            # terminal they would have had (a later runtime in this process moves them again).
            for stray in _stream_handlers():
                if stray.stream is sink:
                    stray.setStream(moved.get(stray, terminal[0]))


def record_traceback(home: Path, command: str, error: BaseException) -> Path | None:
    """Append an unexpected error's traceback to the log file; None when it cannot be written.

    Only the command's name is recorded, not its arguments: a prompt never reaches a log."""
    try:
        home.mkdir(parents=True, exist_ok=True)
        path = log_path(home)
        with path.open("a", encoding="utf-8") as file:
            stamp = datetime.now(UTC).isoformat(timespec="seconds")
            file.write(f"{stamp} ERROR toolpipe {command}: unexpected error\n")
            file.write("".join(traceback.format_exception(error)))
        return path
    except OSError:
        return None


@contextlib.contextmanager
def quiet(name: str) -> Iterator[None]:
    """Drop what logger `name` (and those under it) logs below CRITICAL, for the block: what
    moto's Step Functions interpreter logs of executions the runtime stops on purpose (each
    waiting task "fails" `States.Timeout`, then its Map cannot read the error) is not an error."""
    logger = logging.getLogger(name)
    before = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(before)
