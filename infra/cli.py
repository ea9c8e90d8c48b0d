"""`toolpipe serve`, `toolpipe run "PROMPT"`, `toolpipe show RUN_ID`: the local runtime and its clients.

`serve` holds the runtime in one long-lived process and answers HTTP (infra/local/server.py).
`run` and `show` are its clients: they use the server serving the state folder, or start one
for their own duration (infra/local/client.py), so concurrent commands share one state.
With no `OPENAI_BASE_URL` set, the server serves a scripted OpenAI-compatible model on
127.0.0.1, so a run works offline through the same client code as with a real endpoint.
"""

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from infra.functions import FUNCTIONS
from infra.local.client import read_server_file, try_lock

if TYPE_CHECKING:
    from infra.remote import RemoteSession

_STARTED = time.monotonic()  # for `serve`'s "ready in"
DEFAULT_PORT = 8710


# Control characters other than newline and tab: a model's answer, a tool's result or a file a
# trigger read could carry terminal escapes (set the title, clear the screen) to whoever reads it.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class _Visible:
    """`out`, with every control character written as its escape (`\x1b`), not obeyed."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, text: str) -> int:
        return self._out.write(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))

    def flush(self) -> None:
        self._out.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._out, name)


def _state_dir() -> Path:
    return Path(os.environ.get("TOOLPIPE_HOME", ".toolpipe"))


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def format_item(item: dict[str, Any]) -> list[str]:
    """How one history item reads on a terminal."""
    kind = item["kind"]
    if kind == "user":
        who = "toolpipe (asks the model to repair its answer)" if item.get("repair") else "user"
        return [f"{who}: {_short(item['content'])}"]
    if kind == "assistant":
        lines = []
        if item["tool_calls"]:
            # A long list comes as its first entries; `truncated` has the whole count.
            count = item.get("truncated", {}).get("tool_calls", len(item["tool_calls"]))
            lines.append(f"model (turn {item['turn']}): {count} tool call(s)")
            lines.extend(f"  call {c['name']}({_short(c['arguments'], 200)})" for c in item["tool_calls"])
            if item.get("content"):
                lines.insert(1, f"  says: {_short(item['content'])}")
        else:
            lines.append(f"answer: {item.get('content') or ''}")
        return lines
    mark = "->" if item["status"] == "ok" else "!!"
    took = f" ({item['duration_ms']} ms)" if item.get("duration_ms") is not None else ""
    return [f"  {mark} {item['tool']}: {_short(item['content'])}{took}"]


@contextlib.contextmanager
def _model_endpoint(out: TextIO) -> Iterator[str]:
    """Point the orchestrator at a model for the block; yields how the endpoint reads."""
    if os.environ.get("OPENAI_BASE_URL"):
        description = os.environ["OPENAI_BASE_URL"]
        out.write(f"model endpoint: {description}\n")
        yield description
        return
    from infra.local.scripted_model import DemoResponder, ScriptedModelServer

    with ScriptedModelServer(DemoResponder()) as server:
        description = f"scripted demo model at {server.base_url} (set OPENAI_BASE_URL for a real one)"
        out.write(f"model endpoint: {description}\n")
        previous = {k: os.environ.get(k) for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
        os.environ["OPENAI_BASE_URL"] = server.base_url
        os.environ["OPENAI_API_KEY"] = "scripted"
        try:
            yield description
        finally:
            for k, v in previous.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class _Session:
    """The local server for the state folder, found or started, found again if it goes away.

    A server started for another client's duration stops once idle, and refuses new runs while
    it stops (nothing written): a request that finds it gone or stopping goes to the next one,
    which reads the state the last one saved.
    """

    ATTEMPTS = 5

    def __init__(self, home: Path, env: dict[str, str] | None = None) -> None:
        from infra.local.client import connect

        self._home = home
        self._env = env
        self._connect = connect
        self.connection = connect(home, env=env)
        self._started: list[Any] = []  # every server this session started, to wait for at the end
        self._remember()

    def _remember(self) -> None:
        if self.connection.child is not None:
            self._started.append(self.connection)

    def reconnect(self) -> None:
        self.connection = self._connect(self._home, env=self._env)
        self._remember()

    def health(self) -> dict[str, Any]:
        status, body = self.connection.client.health()
        return body if status == 200 and isinstance(body, dict) else {}

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        from infra.local.client import ServerBusyError, ServerError

        # A GET may be sent again; anything else only when the server certainly did nothing
        # (refused the connection, or answered 503): a POST that timed out may have started a run.
        retried = ServerError if method == "GET" else ServerBusyError
        for attempt in range(self.ATTEMPTS):
            try:
                return self.connection.client.request(method, path, body)
            except retried:
                if attempt == self.ATTEMPTS - 1:
                    raise
                self.reconnect()
        raise AssertionError("unreachable")

    def close(self) -> None:
        for connection in self._started:
            connection.close()


def _open_session(args: argparse.Namespace, env: dict[str, str] | None = None) -> "_Session | RemoteSession":
    """The deployed API named by `--api` (or TOOLPIPE_API_URL), else the local server."""
    if args.api:
        from infra.remote import RemoteSession

        return RemoteSession(args.api, args.api_key)
    return _Session(_state_dir(), env)


def _reason(body: Any) -> str:
    return str(body.get("message", body) if isinstance(body, dict) else body)


def _messages(session: "_Session | RemoteSession", run_id: str, after: int = 0) -> list[dict[str, Any]]:
    """Every history item after seq `after`, page by page (long contents are previews)."""
    items: list[dict[str, Any]] = []
    page: str | None = f"/runs/{run_id}/messages?after={after}"
    while page:
        status, body = session.request("GET", page)
        if status != 200:
            raise RuntimeError(_reason(body))
        items.extend(body["messages"])
        page = body["next"]
    return items


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Start a run on the local server (found, or started for this command) and print its events."""
    from infra.local.client import ServerError

    session = _open_session(args, {"TOOLPIPE_MODEL": args.model} if args.model else None)
    try:
        health = session.health()
        if args.model and session.connection.child is None and health.get("model") != args.model:
            out.write(
                f"error: the server at {session.connection.info.url} runs model "
                f"{health.get('model') or 'default'} (its TOOLPIPE_MODEL); --model applies to a "
                "server this command starts: stop it, or leave out --model\n"
            )
            return 2
        out.write(f"model endpoint: {health.get('model_endpoint', 'unknown')}\n")
        request: dict[str, Any] = {"prompt": args.prompt, "agent": args.agent, "timezone": args.timezone}
        if args.mcp:
            request["mcp_servers"] = args.mcp
        status, body = session.request("POST", "/runs", request)
        if status != 202:
            out.write(f"error: {_reason(body)}\n")
            return 2
        run_id = body["run_id"]
        out.write(f"run {run_id} (agent {args.agent})\n")
        out.flush()
        deadline = time.monotonic() + args.timeout
        printed = 0  # the last seq printed: a stream that broke resumes after it
        for attempt in range(_Session.ATTEMPTS):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                for event, data in session.connection.client.events(run_id, after=printed, timeout=remaining):
                    if event == "item":
                        out.write("\n".join(format_item(data)) + "\n")
                        out.flush()
                        printed = int(data["seq"])
                    elif event == "end":
                        return _finish(data["run"], out)
                    elif event == "timeout":
                        break
                    elif event == "error":
                        raise ServerError(_reason(data))
                else:
                    raise ServerError("the event stream ended early")
                break  # timed out
            except ServerError:
                if attempt == _Session.ATTEMPTS - 1:
                    raise
                session.reconnect()
        out.write(f"error: run {run_id} still running after {args.timeout:g} s\n")
        return 1
    finally:
        session.close()


def _finish(record: dict[str, Any], out: TextIO) -> int:
    usage = record["usage"]
    out.write(
        f"status: {record['status']} · {usage['model_calls']} model call(s) · "
        f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion tokens\n"
    )
    if record["status"] != "succeeded":
        out.write(f"error: run {record['status']}: {record.get('error') or 'no reason recorded'}\n")
        return 1
    return 0


def show(args: argparse.Namespace, out: TextIO) -> int:
    session = _open_session(args)
    try:
        status, body = session.request("GET", f"/runs/{args.run_id}")
        if status == 200:
            executions = list(body["executions"])
            while body["executions_next"]:
                _, body = session.request("GET", body["executions_next"])
                executions.extend(body["executions"])
            body = {**body, "executions": executions, "messages": _messages(session, args.run_id)}
    finally:
        session.close()
    if status != 200:
        out.write(f"error: {_reason(body)}\n")
        return 1
    if args.json:
        out.write(json.dumps(body, indent=2) + "\n")
        return 0
    record = body["run"]
    out.write(
        f"run {record['run_id']} · agent {record['agent']} · {record['status']} · created {record['created_at']}\n"
    )
    for item in body["messages"]:
        out.write(
            "\n".join(
                f"[{item['seq']}] {line}" if i == 0 else f"    {line}"
                for i, line in enumerate(format_item(item))
            )
            + "\n"
        )
    if body["executions"]:
        out.write("tool executions:\n")
        for e in body["executions"]:
            took = "-" if e["duration_ms"] is None else f"{e['duration_ms']} ms"
            kind = f" {e['error_type']}" if e["error_type"] else ""
            out.write(
                f"  turn {e['turn']} {e['tool']}({_short(json.dumps(e['arguments']), 80)})"
                f" · {e['status']}{kind} · {took} · attempts {e['attempts'] or 0}\n"
            )
    usage = record["usage"]
    out.write(
        f"usage: {usage['model_calls']} model call(s) · {usage['prompt_tokens']} prompt + "
        f"{usage['completion_tokens']} completion tokens · ${record['cost_usd']:.6f}\n"
    )
    if record.get("error"):
        out.write(f"error: {record['error']}\n")
    return 0


def invoke(args: argparse.Namespace, out: TextIO) -> int:
    """Feed an event file to one real handler on the local runtime; RUN_ID in it is replaced.

    A Step Functions status-change event reaches the orchestrator as the stack's rule
    transforms it; `--object FILE` first puts FILE as the object an S3 notification names
    (without the bucket's own notification, so only the sample starts a run)."""
    from infra.definition import EXECUTION_ENDED_DETAIL_TYPE, execution_ended_request
    from infra.local import triggers
    from infra.local.lambdas import call_function
    from infra.local.runtime import LocalRuntime

    text = Path(args.event).read_text()
    if args.run_id:
        text = text.replace("RUN_ID", args.run_id)
    event = json.loads(text)
    if args.function == "orchestrator" and event.get("detail-type") == EXECUTION_ENDED_DETAIL_TYPE:
        event = execution_ended_request(event)
    home = _state_dir()
    # This command holds the folder's state itself: with a server serving it too, whichever
    # saved last would erase the other's runs.
    lock = try_lock(home)
    if lock is None:
        info = read_server_file(home)
        where = f" at {info.url}" if info else ""
        out.write(f"error: a toolpipe server{where} is serving {home}: stop it first, or set TOOLPIPE_HOME\n")
        return 2
    try:
        # Workers run too: a run the event starts finishes before the runtime shuts down.
        with _model_endpoint(out), LocalRuntime(state_dir=home) as runtime:
            if args.object:
                for record in event.get("Records", []):
                    key = urllib.parse.unquote_plus(record["s3"]["object"]["key"])
                    triggers.put_quietly(runtime.s3, key, Path(args.object).read_bytes())
            result = call_function(FUNCTIONS[args.function], event)
    finally:
        os.close(lock)
    out.write(json.dumps(result, indent=2) + "\n")
    return 0


def serve(args: argparse.Namespace, out: TextIO) -> int:
    """`toolpipe serve`: one process holding the runtime and answering HTTP until a signal."""
    from infra.local.client import ServerInfo, remove_server_file, write_server_file

    home = _state_dir()
    # Locally the caller is the user, on 127.0.0.1: a run may name its own MCP servers
    # (`toolpipe run --mcp URL`). Reachable from elsewhere, or deployed, that stays off unless
    # turned on: otherwise anyone who reaches the port could make the workers call any URL.
    if args.host in LOOPBACK:
        os.environ.setdefault("TOOLPIPE_ALLOW_RUN_MCP_SERVERS", "1")
    lock = _take_lock(home)
    if lock is None:
        info = read_server_file(home)
        where = f" at {info.url}" if info else ""
        out.write(f"error: a toolpipe server{where} is already serving {home}\n")
        return 2
    stop, hurry = threading.Event(), threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        # The first Ctrl-C drains (runs in progress end); a second one stops them now.
        (hurry if stop.is_set() else stop).set()

    aws_port = _aws_port(args)
    if aws_port and aws_port == args.port:
        os.close(lock)
        out.write(f"error: --aws-port {aws_port} is the API's port: choose another, or 0 for a free one\n")
        return 2
    for option, port in (("--port", args.port), ("--aws-port", aws_port)):
        if not port:
            continue
        try:
            # Before the runtime starts: it would resume the folder's runs only to stop them.
            socket.create_server((args.host, port)).close()
        except OSError as e:
            os.close(lock)
            out.write(
                f"error: cannot serve on {args.host}:{port}: {e.strerror} ({option} 0 picks a free one)\n"
            )
            return 1
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    try:
        from infra.local.runtime import LocalRuntime
        from infra.local.server import LocalServer, serve_until_stopped

        if args.host not in LOOPBACK:
            out.write(
                f"warning: serving on {args.host}: anyone who reaches it can act as any caller "
                "(the X-Toolpipe-Caller header stands in for IAM) and, through the AWS endpoint, "
                "read and change all local state (it accepts any credentials)\n"
            )
        with _model_endpoint(out) as model, LocalRuntime(state_dir=home) as runtime:
            health = {"pid": os.getpid(), "home": str(home), "model": os.environ.get("TOOLPIPE_MODEL")}
            from infra.local.aws_endpoint import AwsEndpoint  # after the runtime: its own cost only

            option, port = "--aws-port", aws_port
            try:
                aws = AwsEndpoint(args.host, aws_port)
                option, port = "--port", args.port
                health["aws_endpoint"] = aws.url
                server = LocalServer(runtime, args.host, args.port, {**health, "model_endpoint": model})
            except OSError as e:
                if option == "--port":
                    aws.close()
                out.write(
                    f"error: cannot serve on {args.host}:{port}: {e.strerror} ({option} 0 picks a free one)\n"
                )
                return 1
            # The AWS endpoint outlives the API server's drain: tools still read and write while
            # the runs in progress end.
            with aws, server:
                started = datetime.now(UTC).isoformat(timespec="seconds")
                write_server_file(home, ServerInfo(server.url, os.getpid(), started, aws_endpoint=aws.url))
                out.write(f"AWS endpoint: {aws.url}\n")
                # Triggers (README "Triggers"): a file put here, or an event put on the bus, starts a run.
                out.write(f"S3 trigger: s3://{runtime.trigger_bucket}/{runtime.trigger_prefix}\n")
                out.write(f"EventBridge bus: {runtime.event_bus_name}\n")
                out.write(
                    f"toolpipe server at {server.api_url} · state {home} · ready in "
                    f"{time.monotonic() - _STARTED:.1f} s · Ctrl-C stops it\n"
                )
                out.flush()
                try:
                    serve_until_stopped(runtime, server, stop, hurry, args.idle_exit, also_serving=[aws])
                finally:
                    # Gone before the state is saved: a client that comes now waits for the lock,
                    # then starts a server that reads that state.
                    remove_server_file(home, os.getpid())
        out.write(f"stopped; state saved in {home}\n")
        return 0
    finally:
        remove_server_file(home, os.getpid())
        os.close(lock)  # only now: the state is saved


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _aws_port(args: argparse.Namespace) -> int:
    """`--aws-port`, or the API port + 1 (a free one when the API port is chosen free)."""
    if args.aws_port is not None:
        return int(args.aws_port)
    return args.port + 1 if 0 < args.port < 65535 else 0


def _take_lock(home: Path) -> int | None:
    # A client checking whether the lock is free holds it for an instant: try for a moment.
    deadline = time.monotonic() + 0.5
    while (lock := try_lock(home)) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return lock


def _wait_seconds(text: str) -> float:
    """Checked before anything starts: a run must not be left behind by a wait that cannot be."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < seconds <= 3600:  # also refuses nan and inf; the event stream waits an hour at most
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 3600 seconds, not {text}")
    return seconds


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a port (0-65535): {text!r}")
    return int(text)


def _run_id(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", text):
        raise argparse.ArgumentTypeError(f"not a run id: {text!r}")
    return text


def _add_api_arguments(command: argparse.ArgumentParser) -> None:
    from infra.remote import API_KEY_ENV, API_URL_ENV

    command.add_argument(
        "--api",
        metavar="URL",
        default=os.environ.get(API_URL_ENV) or None,
        help=f"a deployed stack's API (its ApiUrl output, https://…/v1/) instead of the local server; "
        f"requests are signed with SigV4 (default: ${API_URL_ENV})",
    )
    command.add_argument(
        "--api-key",
        metavar="KEY",
        default=os.environ.get(API_KEY_ENV) or None,
        help=f"with --api, send this key (x-api-key) instead of signing: a stack deployed with "
        f"api_auth=api_key (default: ${API_KEY_ENV})",
    )


def main(argv: list[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(prog="toolpipe", description="Run toolpipe agents on the local runtime.")
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="run an agent on a prompt and print each step")
    run_parser.add_argument("prompt")
    run_parser.add_argument("--agent", default="assistant")
    run_parser.add_argument("--model", help="model name (default: TOOLPIPE_MODEL or gpt-4o-mini)")
    run_parser.add_argument(
        "--timezone", default=os.environ.get("TZ") or "UTC", help="the user's IANA time zone"
    )
    run_parser.add_argument(
        "--timeout", type=_wait_seconds, default=300.0, help="seconds to wait for the run (0-3600]"
    )
    run_parser.add_argument(
        "--mcp", action="append", metavar="URL", help="also offer this MCP server's tools (mcp_<tool>)"
    )
    show_parser = commands.add_parser("show", help="print a run's history")
    show_parser.add_argument("run_id", type=_run_id)
    show_parser.add_argument("--json", action="store_true", help="print the API's JSON")
    for remote in (run_parser, show_parser):
        _add_api_arguments(remote)
    invoke_parser = commands.add_parser("invoke", help="run one handler on an event file (see events/)")
    invoke_parser.add_argument("function", choices=sorted(FUNCTIONS))
    invoke_parser.add_argument("event", help="path of a JSON event, e.g. events/api_post_run.json")
    invoke_parser.add_argument("--run-id", help="replaces RUN_ID in the event")
    invoke_parser.add_argument(
        "--object", metavar="FILE", help="triggers: put FILE as the object an S3 notification names, first"
    )
    serve_parser = commands.add_parser("serve", help="serve the local runtime over HTTP until Ctrl-C")
    serve_parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve_parser.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)"
    )
    serve_parser.add_argument(
        "--aws-port",
        type=_port,
        help="port of the AWS endpoint (default: --port + 1, or a free one with --port 0)",
    )
    serve_parser.add_argument(
        "--idle-exit",
        type=float,
        metavar="SECONDS",
        help="stop after this long with no request and no run in progress (default: never)",
    )
    args = parser.parse_args(argv)
    if getattr(args, "api_key", None) and not args.api:
        parser.error("--api-key (or TOOLPIPE_API_KEY) goes with --api (or TOOLPIPE_API_URL)")
    if getattr(args, "api", None) and getattr(args, "model", None):
        parser.error(
            "--model applies to the local server: a deployed stack's model is set when deploying (-c model_name=…)"
        )
    commands_by_name = {"run": run, "show": show, "invoke": invoke, "serve": serve}
    out = cast(TextIO, _Visible(out))
    try:
        return commands_by_name[args.command](args, out)
    except KeyboardInterrupt:
        out.write("interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader went away (`toolpipe show … | head`): nothing left to tell anyone.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as e:  # a user sees one line, never a traceback
        out.write(f"error: {type(e).__name__}: {e}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
