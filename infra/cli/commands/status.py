"""`toolpipe status`: the server serving the state folder (pid, URL, model, app) and the calls
that wait for a person or a program; `toolpipe stop`: stop that server.

A server a command started for itself stops on its own once nothing runs; calls that wait are
kept in the state folder, and the next server (started by `approve`, `run`, or `serve`) resumes
them, waiting again on the same approvals.
"""

import argparse
import os
import signal
import time
from typing import Any, TextIO

from toolpipe.infra.cli import discovery
from toolpipe.infra.cli.errors import EXIT_FAILED, EXIT_OK, CommandError
from toolpipe.infra.cli.offline import open_reading_session
from toolpipe.infra.cli.output import write_json
from toolpipe.infra.local.client import Client

# How long `stop` waits for the server to save its state and let go of the folder: runs at work
# get the server's drain (30 s) to end; calls that only wait do not hold it.
STOP_SECONDS = 45.0


def status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    home = discovery.state_dir()
    info = discovery.discover(home) if home.is_dir() else None
    health = _health(info) if info is not None else None
    waits = _waits(args) if home.is_dir() else []
    if args.json:
        write_json(out, {"home": str(home), "server": health, "waits": waits})
        return EXIT_OK
    if info is None or health is None:
        out.write(f"no server serves {home}\n")
    else:
        out.write(f"server: pid {info.pid} at {info.url}/v1, since {info.started}\n")
        out.write(
            "  started by a command for itself: it stops once nothing runs\n"
            if health.get("auto")
            else "  started by toolpipe serve: it runs until stopped (toolpipe stop, or Ctrl-C there)\n"
        )
        out.write(f"  model endpoint: {health.get('model_endpoint') or 'unknown'}\n")
        if health.get("app"):
            version = f", version {health['app_version']}" if health.get("app_version") else ""
            out.write(f"  app: {health['app']}{version}\n")
        if health.get("app_error"):
            out.write(f"  app error: {health['app_error']}\n")
    out.write(_waits_line(waits, info is not None))
    for wait in waits:
        out.write(f"  {_wait_row(wait)}\n")
    return EXIT_OK


def stop(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    home = discovery.state_dir()
    info = discovery.discover(home) if home.is_dir() else None
    if info is None:
        out.write(f"no server serves {home}: nothing to stop\n")
        return EXIT_OK
    try:
        os.kill(info.pid, signal.SIGTERM)  # what Ctrl-C does: it drains, then saves the state
    except ProcessLookupError:
        pass  # it ended meanwhile
    except PermissionError as e:
        raise CommandError(f"cannot stop the server at {info.url} (pid {info.pid}): {e.strerror}") from None
    deadline = time.monotonic() + STOP_SECONDS
    while discovery.lock_is_held(home):
        if time.monotonic() > deadline:
            raise CommandError(
                f"the server at {info.url} (pid {info.pid}) is still stopping after {STOP_SECONDS:g} s",
                EXIT_FAILED,
            )
        time.sleep(0.05)
    out.write(f"stopped the server at {info.url} (pid {info.pid}); state saved in {home}\n")
    waits = _waits(args)
    if waits:
        out.write(f"{_count(len(waits))} still wait: the next server resumes them (toolpipe approvals)\n")
    return EXIT_OK


def _health(info: discovery.ServerInfo) -> dict[str, Any] | None:
    status, body = Client(info.url, timeout=5.0).health()
    if status != 200 or not isinstance(body, dict):
        return None
    return {"pid": info.pid, "url": f"{info.url}/v1", "started": info.started, **body}


def _waits(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The calls that wait, as `toolpipe approvals` lists them: from the server, or from the saved
    state when none serves the folder."""
    try:
        session = open_reading_session(argparse.Namespace(**{**vars(args), "api": None, "api_key": None}))
    except CommandError:
        return []  # no saved state: nothing ever waited here
    try:
        status, body = session.request("GET", "/approvals?status=pending")
    finally:
        session.close()
    return list(body["approvals"]) if status == 200 else []


def _count(n: int) -> str:
    return f"{n} call{'s' if n != 1 else ''}"


def _waits_line(waits: list[dict[str, Any]], serving: bool) -> str:
    if not waits:
        return "nothing waits\n"
    resumed = "" if serving else " (kept: the next server resumes them)"
    return f"{_count(len(waits))} wait{'s' if len(waits) == 1 else ''}{resumed}:\n"


def _wait_row(wait: dict[str, Any]) -> str:
    kind = wait.get("kind", "approval")
    how = {
        "approval": f"toolpipe approve {wait['approval_id']}",
        "human": f"toolpipe answer {wait['approval_id']} TEXT",
    }.get(kind, f"POST /runs/{wait['run_id']}/calls/{wait['seq']}/result")
    return f"{wait['approval_id']}  {kind}  {wait['tool']}  run {wait['run_id']}  ({how})"
