"""`toolpipe run PROMPT`: start a run and print its transcript as it happens."""

import argparse
import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

from toolpipe.infra.cli import discovery
from toolpipe.infra.cli.commands.agents import default_agent
from toolpipe.infra.cli.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, CommandError, reason, refused
from toolpipe.infra.cli.model_endpoint import (
    SCRIPTED_MODEL_ENV,
    ModelInUse,
    checked_scripted_model,
    reachable_endpoint,
    shown,
    wanted_model,
)
from toolpipe.infra.cli.output import approval_line, format_item, write_json
from toolpipe.infra.cli.session import ATTEMPTS, Session, keyed, open_session, run_view
from toolpipe.infra.local.client import ServerError
from toolpipe.shared.app_ref import APP_ENV, app_version, find_app

# How long a run waits for the server to reload the app's files saved a moment ago.
RELOAD_WAIT_SECONDS = 3.0


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Start a run on the local server (found, or started for this command) and print its events.

    Text: the run's transcript on stdout as it happens. `--json`: the transcript on stderr (it is
    progress then) and the run, as `show --json` prints it, on stdout once it ended."""
    transcript = err if args.json else out
    env: dict[str, str] = {}
    if not args.api:
        if discovery.live_server(discovery.state_dir()) is None:
            # The app loads here, or the command stops with why, before a server starts for it.
            # A server that runs already says itself what is wrong with the app (`POST /runs`
            # answers it): importing the app here too would cost this command a third of its CPU.
            default_agent()
        script = checked_scripted_model(args)
        if script is not None:
            env[SCRIPTED_MODEL_ENV] = str(script)  # for a server this command starts
        reachable_endpoint()
    if args.model:
        env["TOOLPIPE_MODEL"] = args.model
    model = None if args.api else wanted_model(args, os.environ)
    session = open_session(args, env or None, model=model, err=err)
    run_id: str | None = None
    interrupted = False
    try:
        health = _server_health(session, args)
        if not args.api:
            health = _current_app(session, health, err)
        described = ModelInUse(health.get("model_endpoint", "unknown"), health.get("model_wanted"))
        err.write(described.line() if not args.api else f"model endpoint: {described.description}\n")
        run_id, agent = _start(session, args)
        transcript.write(f"run {run_id} (agent {agent})\n")
        transcript.flush()
        code = _watch(session, run_id, args, transcript, out)
        if code is not None:
            return code
        if args.json:
            write_json(out, run_view(session, run_id))
        raise CommandError(
            f"run {run_id} still running after {args.timeout:g} s (it goes on: toolpipe show {run_id})"
        )
    except KeyboardInterrupt:
        if run_id is None:
            raise
        # The run is the server's, not this command's: it goes on. Not waiting for a server this
        # command started either: it stops by itself once nothing runs.
        interrupted = True
        raise CommandError(_goes_on(session, run_id, args), EXIT_INTERRUPTED) from None
    finally:
        if not interrupted:
            # Ctrl-C once the run ended (while a server this command started stops): the run's
            # outcome stands, as its status says.
            with contextlib.suppress(KeyboardInterrupt):
                _hold_ctrl_c(False)
                session.close()


def _hold_ctrl_c(held: bool) -> None:
    """Hold SIGINT back (pending, not lost) or let it through, where a process can."""
    if hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK if held else signal.SIG_UNBLOCK, {signal.SIGINT})


def _goes_on(session: Session, run_id: str, args: argparse.Namespace) -> str:
    """What an interrupted `run` says: the run goes on, and where to look."""
    if args.api:
        return f"interrupted; run {run_id} goes on in the stack: toolpipe show {run_id} --api {args.api}"
    kept = (
        " (started for this command, it stops once nothing runs; calls that wait are kept for the next one)"
        if session.started_server
        else ""
    )
    return (
        f"interrupted; run {run_id} goes on in the server at {session.url}{kept}: "
        f"see it with toolpipe show {run_id}, and the server with toolpipe status"
    )


def _server_health(session: Session, args: argparse.Namespace) -> dict[str, Any]:
    """The server's health, once it is known to run this command's model and app."""
    health = session.health()
    if args.model and not session.started_server and health.get("model") != args.model:
        raise CommandError(
            f"the server at {session.url} runs model "
            f"{health.get('model') or 'default'} (its TOOLPIPE_MODEL); --model applies to a "
            "server this command starts: stop it, or leave out --model",
            EXIT_USAGE,
        )
    app = os.environ.get(APP_ENV)
    if not args.api and not session.started_server and health.get("app") != app:
        raise CommandError(
            f"the server at {session.url} runs app {health.get('app') or 'none'}, "
            f"not {app or 'none'}: stop it, or run this from its project",
            EXIT_USAGE,
        )
    return health


def _current_app(session: Session, health: dict[str, Any], err: TextIO) -> dict[str, Any]:
    """The server's health once it runs the app as its files are now: a file saved a moment ago
    is being reloaded (`toolpipe serve` follows them), so wait a little; past that, say so."""
    if "app_version" not in health:
        return health  # a server that does not follow the app's files: nothing to compare
    on_disk = app_version(find_app())
    deadline = time.monotonic() + RELOAD_WAIT_SECONDS
    while health.get("app_version") != on_disk and time.monotonic() < deadline:
        time.sleep(0.05)
        health = session.health() or health
    if health.get("app_version") != on_disk:
        why = health.get("app_error") or "it has not reloaded them"
        err.write(
            f"toolpipe: warning: the server at {session.url} runs your app as it was before your last "
            f"change (version {health.get('app_version')}; your files: {on_disk}): {why}\n"
        )
    return health


def _start(session: Session, args: argparse.Namespace) -> tuple[str, str]:
    """`POST /runs`: the new run's id and its agent, as the server that runs it says."""
    request: dict[str, Any] = {"prompt": args.prompt, "timezone": args.timezone}
    if args.agent is not None:
        request["agent"] = args.agent
    if args.mcp:
        request["mcp_servers"] = args.mcp
    status, body = session.request("POST", "/runs", request, keyed())
    if status != 202:
        raise refused(status, body)
    # A stack or server from before the answer named the agent: the one asked for, else its own.
    agent = body.get("agent") or args.agent or ("the stack's default" if args.api else "the server's default")
    return str(body["run_id"]), str(agent)


def _watch(
    session: Session, run_id: str, args: argparse.Namespace, transcript: TextIO, out: TextIO
) -> int | None:
    """Print the run's events until it ends (its exit status) or `--timeout` passes (None).

    A stream that breaks is opened again on the server found again, after the last item printed.
    """
    deadline = time.monotonic() + args.timeout
    printer = _Transcript(transcript)
    for attempt in range(ATTEMPTS):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            # Held open while the run's end is printed, as it was read.
            events = session.events(run_id, after=printer.printed, timeout=remaining)
            record = printer.follow(events)
            if record is None:
                break  # timed out
            return _finish(session, record, args, transcript, out)
        except ServerError:
            if attempt == ATTEMPTS - 1:
                raise
            session.reconnect()
    return None


class _Transcript:
    """The run's events as they are written: its history items and the calls that wait."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self.printed = 0  # the last seq printed: a stream that broke resumes after it
        self._own: str | None = None  # the run's own agent: the first reply's

    def follow(self, events: Iterator[tuple[str, Any]]) -> dict[str, Any] | None:
        """Write each event; the run's record once it ended, None when the wait timed out.

        Raises:
            ServerError: the stream failed, or ended before the run did.
        """
        for event, data in events:
            if event == "item":
                self._item(data)
            elif event == "approval":
                # A call waits for a person: say how to decide, and keep watching.
                self._write(approval_line(data))
            elif event == "end":
                return dict(data["run"])
            elif event == "timeout":
                return None
            elif event == "error":
                raise ServerError(reason(data))
        raise ServerError("the event stream ended early")

    def _item(self, item: dict[str, Any]) -> None:
        if self._own is None and item.get("kind") == "assistant":
            self._own = item.get("agent")
        self._write("\n".join(format_item(item, self._own)))
        self.printed = int(item["seq"])

    def _write(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()


def _finish(
    session: Session,
    record: dict[str, Any],
    args: argparse.Namespace,
    transcript: TextIO,
    out: TextIO,
) -> int:
    usage = record["usage"]
    # The run ended: from its status line on, Ctrl-C interrupts nothing (held until the command
    # closes its session, where it is let go and ignored).
    _hold_ctrl_c(True)
    transcript.write(
        f"status: {record['status']} · {usage['model_calls']} model call(s) · "
        f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion tokens\n"
    )
    transcript.flush()  # the run's end, shown as it is known: not once the command exits
    if args.json:
        write_json(out, run_view(session, record["run_id"]))
    if record["status"] != "succeeded":
        error = str(record.get("error") or "no reason recorded")
        url = os.environ.get("OPENAI_BASE_URL", "").strip()
        if "model endpoint" in error and url and not args.api:  # the model this command asked for
            error += f" (the model at OPENAI_BASE_URL={shown(url)})"
        raise CommandError(f"run {record['status']}: {error}")
    return EXIT_OK
