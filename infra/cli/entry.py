"""`main`: the `toolpipe` command from its arguments to its exit status."""

import argparse
import atexit
import contextlib
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import NoReturn, TextIO, cast

from toolpipe.infra.cli.commands import COMMANDS, LOCAL_STATE_COMMANDS
from toolpipe.infra.cli.discovery import state_dir
from toolpipe.infra.cli.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CommandError,
)
from toolpipe.infra.cli.output import Visible, write_error
from toolpipe.infra.cli.parser import name_the_app, parse
from toolpipe.infra.local.client import ServerError
from toolpipe.shared.errors import ConfigurationError


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The `toolpipe` command; returns its exit status (argparse raises SystemExit(2) itself)."""
    raw_out = out or sys.stdout
    arguments = sys.argv[1:] if argv is None else argv
    # Known before parsing, so that argparse's own errors come as JSON too.
    json_errors = "--json" in arguments
    out, err = cast(TextIO, Visible(raw_out)), cast(TextIO, Visible(err or sys.stderr))
    try:
        # Before parsing: `--agent` is checked against the app's agents as it is parsed.
        remote = name_the_app(arguments)
    except ConfigurationError as e:
        return write_error(err, str(e), EXIT_USAGE, json_errors)
    args = parse(arguments, out, err, json_errors, remote)
    try:
        if args.command in LOCAL_STATE_COMMANDS and not getattr(args, "api", None):
            # Which folder, said once: found from a subfolder, it may not be the one in sight.
            err.write(f"toolpipe: state folder {state_dir()}\n")
        code = int(COMMANDS[args.command](args, out, err))
        out.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return code
    except BrokenPipeError:
        # The reader went away (`toolpipe show … | head -1`): nothing left to tell anyone. stdout
        # points at /dev/null, so the interpreter's last flush has nowhere to fail (Python's
        # documented recipe, "Note on SIGPIPE").
        if raw_out is sys.stdout:
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as e:
        return write_error(err, *_failure(e, args, err), json_errors)
    except KeyboardInterrupt:
        return write_error(err, "interrupted", EXIT_INTERRUPTED, json_errors)


def program() -> NoReturn:
    """`toolpipe` as a program (the `toolpipe` script, `python -m toolpipe`): `main`, then exit.

    Without the interpreter's teardown, which frees every object one at a time: ~0.55 s of CPU
    after `toolpipe serve` (moto's state, ~1,300 modules), ~0.02 s after a `status`, for
    nothing the process needs. The rest of a normal exit is done, in its order: threads that
    are not daemons are waited for and threading's exit hooks run (a pool's work is finished,
    and a process pool told to stop: skipped, one kept `serve` from ever ending), then the
    exit handlers (logging's, `weakref.finalize`'s), then the streams are flushed, with what
    those handlers printed. What is lost is what Python does not promise at exit either: the
    `__del__` of objects still alive.
    """
    code = main()
    _threads_shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone, a stream closed
            stream.flush()
    os._exit(code)


# The first step of the interpreter's own exit (`Py_Finalize`): join the threads that are not
# daemons, then run the hooks registered with `threading._register_atexit`. Private, and
# absent from the type stubs; there is no public way to run it.
_threads_shutdown: Callable[[], None] = threading._shutdown  # type: ignore[attr-defined]


def _failure(error: Exception, args: argparse.Namespace, err: TextIO) -> tuple[str, int]:
    """What the user reads of a command's error, in one line, and the exit status."""
    if isinstance(error, CommandError):
        return str(error), error.code
    if isinstance(error, ConfigurationError):  # the app or a setting: the user's to fix
        return str(error), EXIT_USAGE
    if isinstance(error, ServerError):  # the local server could not be found, started or reached
        return str(error), EXIT_FAILED
    # Anything else: a user sees one line, never a traceback: that goes to the log.
    from toolpipe.infra.local.logfile import record_traceback

    try:
        where = record_traceback(state_dir(), args.command, error)
    except ConfigurationError:  # no state folder to be found (an unreadable pyproject.toml)
        where = None
    if args.verbose:
        with contextlib.suppress(OSError):
            err.write("".join(traceback.format_exception(error)))
    detail = f" (traceback in {where})" if where else ""
    return f"{type(error).__name__}: {error}{detail}", EXIT_FAILED
