"""`toolpipe serve`: one process holding the runtime and answering HTTP until a signal.

`run`, `show` and the other commands are its clients: they use the server serving the state
folder, or start one for their own duration (infra/cli/discovery.py), so concurrent commands
share one state.
"""

import argparse
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from toolpipe.infra.cli.discovery import (
    ServerInfo,
    remove_server_file,
    serving,
    state_dir,
    take_lock,
    write_server_file,
)
from toolpipe.infra.cli.errors import EXIT_OK, EXIT_USAGE, CommandError
from toolpipe.infra.cli.model_endpoint import (
    ModelInUse,
    checked_scripted_model,
    model_endpoint,
    reachable_endpoint,
)
from toolpipe.infra.cli.serving import LOOPBACK, aws_port, check_ports, exit_past_stray_threads, stop_events
from toolpipe.infra.local.client import STARTER_ENV
from toolpipe.shared.app_ref import APP_ENV

if TYPE_CHECKING:
    from collections.abc import Callable

    from toolpipe.infra.local.app_reload import AppReloader
    from toolpipe.infra.local.aws_endpoint import AwsEndpoint
    from toolpipe.infra.local.runtime import LocalRuntime
    from toolpipe.infra.local.server import LocalServer

_STARTED = time.monotonic()  # for "ready in"


def serve(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Hold the folder's lock and serve the runtime until a signal.

    Where it serves, once ready: banner lines on stderr, or with `--json` one JSON document on
    stdout (its one result: a script reads it). Nothing else ever reaches stdout."""
    from toolpipe.infra.local.logfile import logs_to_file

    home = state_dir()
    # What the command that started this server sends with its requests: it alone may release
    # it (a server a person started has none). Out of the environment before anything runs.
    starter = (os.environ.pop(STARTER_ENV, None) or None) if args.for_client else None
    checked_scripted_model(args)  # a broken script is one line before the lock is taken
    reachable_endpoint()  # so is an OPENAI_BASE_URL nothing answers at
    api_port, aws = args.port, aws_port(args)
    if aws and aws == api_port:
        raise CommandError(
            f"--aws-port {aws} is the API's port: choose another, or 0 for a free one", EXIT_USAGE
        )
    # Locally the caller is the user, on 127.0.0.1: a run may name its own MCP servers
    # (`toolpipe run --mcp URL`). Reachable from elsewhere, or deployed, that stays off unless
    # turned on: otherwise anyone who reaches the port could make the workers call any URL.
    if args.host in LOOPBACK:
        os.environ.setdefault("TOOLPIPE_ALLOW_RUN_MCP_SERVERS", "1")
    lock = take_lock(home)
    if lock is None:
        # 2, which `connect` (infra/cli/discovery.py) reads as "another client's server won the lock".
        raise CommandError(f"{serving(home)} is already serving {home}", EXIT_USAGE)
    try:
        check_ports(args.host, [("--port", api_port), ("--aws-port", aws)])
        if args.host not in LOOPBACK:
            err.write(
                f"toolpipe: warning: serving on {args.host}: anyone who reaches it can act as any caller "
                "(the X-Toolpipe-Caller header stands in for IAM) and, through the AWS endpoint, "
                "read and change all local state (it accepts any credentials)\n"
            )
        with logs_to_file(home, echo=err if args.verbose else None):
            # Text is a banner for whoever watches (stderr): stdout stays for what can be piped.
            _serve_runtime(args, out if args.json else err, err, home, aws, starter)
        err.write(f"stopped; state saved in {home}\n")
    finally:
        remove_server_file(home, os.getpid())
        os.close(lock)  # only now: the state is saved
    exit_past_stray_threads(err)
    return EXIT_OK


def _serve_runtime(
    args: argparse.Namespace, ready_to: TextIO, err: TextIO, home: Path, aws_port: int, starter: str | None
) -> None:
    # The runtime first: its import pauses the collector, then freezes what it made (moto,
    # botocore), which the others import too.
    from toolpipe.infra.local.runtime import LocalRuntime  # noqa: I001
    from toolpipe.infra.local.app_reload import AppReloader
    from toolpipe.infra.local.serve_loop import serve_until_stopped

    stop, hurry = stop_events()
    with model_endpoint(args) as model, LocalRuntime(state_dir=home) as runtime:
        # Your app, loaded now (an error is said here, not at the first run) and again whenever
        # its files change.
        app = AppReloader(runtime, _console(err))
        aws, server = _servers(args, runtime, home, aws_port, model, app, starter)
        # The AWS endpoint outlives the API server's drain: tools still read and write while
        # the runs in progress end.
        with app, aws, server:
            started = datetime.now(UTC).isoformat(timespec="seconds")
            write_server_file(home, ServerInfo(server.url, os.getpid(), started, aws_endpoint=aws.url))
            _write_ready(args, ready_to, home, runtime, server, aws.url, model)
            try:
                serve_until_stopped(runtime, server, stop, hurry, args.idle_exit, also_serving=[aws])
            finally:
                # Gone before the state is saved: a client that comes now waits for the lock,
                # then starts a server that reads that state.
                remove_server_file(home, os.getpid())


def _console(err: TextIO) -> "Callable[[str], None]":
    """A line for whoever watches the server, on stderr (a server a command started writes it
    to the log)."""

    def say(line: str) -> None:
        err.write(line + "\n")
        err.flush()

    return say


def _servers(
    args: argparse.Namespace,
    runtime: "LocalRuntime",
    home: Path,
    aws_port: int,
    model: ModelInUse,
    app: "AppReloader",
    starter: str | None,
) -> tuple["AwsEndpoint", "LocalServer"]:
    """The AWS endpoint and the API server, bound (not serving yet)."""
    from toolpipe.infra.local.server import LocalServer

    health = {
        "pid": os.getpid(),
        "home": str(home),
        "model": os.environ.get("TOOLPIPE_MODEL"),
        "model_wanted": model.wanted,
        # Started by a command for its own duration (it stops once idle): a command that asks
        # for another model may wait for it to stop and start its own (infra/cli/session.py).
        "auto": bool(args.for_client),
        "app": os.environ.get(APP_ENV),
    }
    from toolpipe.infra.local.aws_endpoint import AwsEndpoint  # after the runtime: its own cost only

    option, port = "--aws-port", aws_port
    try:
        aws = AwsEndpoint(args.host, aws_port)
        option, port = "--port", args.port
        server = LocalServer(
            runtime,
            args.host,
            args.port,
            {**health, "aws_endpoint": aws.url, "model_endpoint": model.description},
            app,
            starter=starter,
        )
    except OSError as e:
        if option == "--port":
            aws.close()
        raise CommandError(
            f"cannot serve on {args.host}:{port}: {e.strerror} ({option} 0 picks a free one)"
        ) from None
    return aws, server


def _write_ready(
    args: argparse.Namespace,
    out: TextIO,
    home: Path,
    runtime: "LocalRuntime",
    server: "LocalServer",
    aws_url: str,
    model: ModelInUse,
) -> None:
    """Where it serves, once it answers: the API, the AWS endpoint, the triggers, the model."""
    # Triggers (README "Triggers"): a file put here, or an event put on the bus, starts a run.
    trigger = f"s3://{runtime.trigger_bucket}/{runtime.trigger_prefix}"
    ready = time.monotonic() - _STARTED
    if args.json:
        served = {
            "api_url": server.api_url,
            "url": server.url,
            "aws_endpoint": aws_url,
            "s3_trigger": trigger,
            "event_bus": runtime.event_bus_name,
            "model_endpoint": model.description,
            "model_wanted": model.wanted,
            "home": str(home),
            "pid": os.getpid(),
            "ready_seconds": round(ready, 2),
        }
        out.write(json.dumps(served) + "\n")
    else:
        out.write(model.line())
        out.write(f"AWS endpoint: {aws_url}\n")
        out.write(f"S3 trigger: {trigger}\n")
        out.write(f"EventBridge bus: {runtime.event_bus_name}\n")
        out.write(
            f"toolpipe server at {server.api_url} · state {home} · ready in {ready:.1f} s · Ctrl-C stops it\n"
        )
    out.flush()
