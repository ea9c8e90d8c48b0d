"""The `toolpipe` command: `run`, `show`, `agents`, `serve`, `invoke` on the local runtime.

`serve` holds the runtime in one long-lived process and answers HTTP (infra/local/server.py).
`run` and `show` are its clients: they use the server serving the state folder, or start one
for their own duration (infra/local/client.py), so concurrent commands share one state.
With no `OPENAI_BASE_URL` set, the server serves a scripted OpenAI-compatible model on
127.0.0.1, so a run works offline through the same client code as with a real endpoint.

Conventions every command keeps (README "The CLI"): what the command was asked for goes to
stdout, everything else (banners, warnings, errors) to stderr, and logs to the state folder's
`toolpipe.log`; `--json` makes stdout one JSON document; exit 0 ok, 1 failed, 2 usage; input
is checked before anything starts; no traceback reaches the terminal.
"""

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import sys
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

from toolpipe.infra.functions import FUNCTIONS
from toolpipe.infra.local.client import ServerError, read_server_file, try_lock
from toolpipe.shared.agents.app import APP_ENV, AppRef, find_app, use_app, valid_module_name
from toolpipe.shared.errors import ConfigurationError

if TYPE_CHECKING:
    from toolpipe.infra.remote import RemoteSession

_STARTED = time.monotonic()  # for `serve`'s "ready in"
DEFAULT_PORT = 8710

# Exit statuses (README "The CLI", and every command's --help).
EXIT_OK = 0
EXIT_FAILED = 1  # the run failed, or the thing asked for could not be done
EXIT_USAGE = 2  # bad flags or input, an unknown agent: argparse's own status for its errors
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as a shell reports it
# The reader of stdout went away (`toolpipe show ID | head -1`): 128 + SIGPIPE, what a shell
# reports for any program stopped that way, so `set -o pipefail` scripts see what they expect
# and it is not taken for a failed run.
EXIT_BROKEN_PIPE = 141

EPILOG = """\
output: results on stdout; banners, warnings and errors on stderr; --json makes stdout one
  JSON document (an error: {"error": "...", "exit_code": N} on stderr). Logs (handlers,
  emulator) go to $TOOLPIPE_HOME/toolpipe.log (default .toolpipe/); --verbose also prints them.
exit status: 0 ok, 1 the run failed (or what was asked could not be done), 2 usage error
  (bad flags or input, unknown agent), 130 interrupted, 141 stdout closed early.
"""


class CommandError(Exception):
    """What a command could not do, as the one line the user reads, with its exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


# Control characters other than newline and tab: a model's answer, a tool's result or a file a
# trigger read could carry terminal escapes (set the title, clear the screen) to whoever reads it.
# Bidirectional overrides and isolates too: they reorder what a person reads (an address in an
# approval shown as another).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


class _Visible:
    """`out`, with every control character written as its escape (`\x1b`), not obeyed."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, text: str) -> int:
        return self._out.write(_CONTROL.sub(_escaped, text))

    def flush(self) -> None:
        self._out.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._out, name)


def _state_dir() -> Path:
    # Absolute: a tool that changes the process's directory (`os.chdir`) must not move it.
    return Path(os.environ.get("TOOLPIPE_HOME", ".toolpipe")).absolute()


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def format_item(item: dict[str, Any], own_agent: str | None = None) -> list[str]:
    """How one history item reads on a terminal; a reply of another agent than the run's own
    (`own_agent`: a handoff moved the run) names it."""
    kind = item["kind"]
    if kind == "user":
        who = "toolpipe (asks the model to repair its answer)" if item.get("repair") else "user"
        return [f"{who}: {_short(item['content'])}"]
    if kind == "assistant":
        lines = []
        if item["tool_calls"]:
            # A long list comes as its first entries; `truncated` has the whole count.
            count = item.get("truncated", {}).get("tool_calls", len(item["tool_calls"]))
            lines.append(f"{who_answered(item, own_agent)} (turn {item['turn']}): {count} tool call(s)")
            lines.extend(f"  call {c['name']}({_short(c['arguments'], 200)})" for c in item["tool_calls"])
            if item.get("content"):
                lines.insert(1, f"  says: {_short(item['content'])}")
        else:
            by = f" ({item['agent']})" if item.get("agent") not in (None, own_agent) else ""
            lines.append(f"answer{by}: {item.get('content') or ''}")
        return lines
    mark = "->" if item["status"] == "ok" else "!!"
    took = f" ({item['duration_ms']} ms)" if item.get("duration_ms") is not None else ""
    return [f"  {mark} {item['tool']}: {_short(item['content'])}{took}"]


def who_answered(item: dict[str, Any], own_agent: str | None) -> str:
    """ "model", or, when the turn was another agent's than the run's own, "model [agent]"."""
    return f"model [{item['agent']}]" if item.get("agent") not in (None, own_agent) else "model"


@contextlib.contextmanager
def _model_endpoint() -> Iterator[str]:
    """Point the orchestrator at a model for the block; yields how the endpoint reads."""
    if os.environ.get("OPENAI_BASE_URL"):
        yield os.environ["OPENAI_BASE_URL"]
        return
    from toolpipe.infra.local.scripted_model import DemoResponder, ScriptedModelServer

    with ScriptedModelServer(DemoResponder()) as server:
        description = f"scripted demo model at {server.base_url} (set OPENAI_BASE_URL for a real one)"
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
        from toolpipe.infra.local.client import connect

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
        from toolpipe.infra.local.client import ServerBusyError, ServerError

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
        from toolpipe.infra.remote import RemoteSession

        return RemoteSession(args.api, args.api_key)
    return _Session(_state_dir(), env)


def _reason(body: Any) -> str:
    return str(body.get("message", body) if isinstance(body, dict) else body)


def _refused(status: int, body: Any) -> CommandError:
    """The server's refusal as the command's error: a 4xx is the request's fault (usage)."""
    return CommandError(_reason(body), EXIT_USAGE if 400 <= status < 500 else EXIT_FAILED)


def _messages(session: "_Session | RemoteSession", run_id: str, after: int = 0) -> list[dict[str, Any]]:
    """Every history item after seq `after`, page by page (long contents are previews)."""
    items: list[dict[str, Any]] = []
    page: str | None = f"/runs/{run_id}/messages?after={after}"
    while page:
        status, body = session.request("GET", page)
        if status != 200:
            raise _refused(status, body)
        items.extend(body["messages"])
        page = body["next"]
    return items


def _run_view(session: "_Session | RemoteSession", run_id: str) -> dict[str, Any]:
    """`GET /runs/{id}` with every execution and history item: what `show --json` prints."""
    status, body = session.request("GET", f"/runs/{run_id}")
    if status != 200:
        raise _refused(status, body) if status != 404 else CommandError(_reason(body))
    executions = list(body["executions"])
    while body["executions_next"]:
        _, body = session.request("GET", body["executions_next"])
        executions.extend(body["executions"])
    return {**body, "executions": executions, "messages": _messages(session, run_id)}


def _write_json(out: TextIO, document: Any) -> None:
    out.write(json.dumps(document, indent=2) + "\n")


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Start a run on the local server (found, or started for this command) and print its events.

    Text: the run's transcript on stdout as it happens. `--json`: the transcript on stderr (it is
    progress then) and the run, as `show --json` prints it, on stdout once it ended."""
    transcript = err if args.json else out
    if not args.api:
        _default_agent()  # the app loads here, or the command stops with why (not the server)
    session = _open_session(args, {"TOOLPIPE_MODEL": args.model} if args.model else None)
    try:
        health = session.health()
        if args.model and session.connection.child is None and health.get("model") != args.model:
            raise CommandError(
                f"the server at {session.connection.info.url} runs model "
                f"{health.get('model') or 'default'} (its TOOLPIPE_MODEL); --model applies to a "
                "server this command starts: stop it, or leave out --model",
                EXIT_USAGE,
            )
        app = os.environ.get(APP_ENV)
        if not args.api and session.connection.child is None and health.get("app") != app:
            raise CommandError(
                f"the server at {session.connection.info.url} runs app {health.get('app') or 'none'}, "
                f"not {app or 'none'}: stop it, or run this from its project",
                EXIT_USAGE,
            )
        err.write(f"model endpoint: {health.get('model_endpoint', 'unknown')}\n")
        request: dict[str, Any] = {"prompt": args.prompt, "timezone": args.timezone}
        if args.agent is not None:
            request["agent"] = args.agent
        if args.mcp:
            request["mcp_servers"] = args.mcp
        status, body = session.request("POST", "/runs", request)
        if status != 202:
            raise _refused(status, body)
        run_id = body["run_id"]
        agent = args.agent or ("the stack's default" if args.api else _default_agent())
        transcript.write(f"run {run_id} (agent {agent})\n")
        transcript.flush()
        deadline = time.monotonic() + args.timeout
        printed = 0  # the last seq printed: a stream that broke resumes after it
        own: str | None = None
        for attempt in range(_Session.ATTEMPTS):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                for event, data in session.connection.client.events(run_id, after=printed, timeout=remaining):
                    if event == "item":
                        if own is None and data.get("kind") == "assistant":
                            own = data.get("agent")  # the first reply is the run's own agent's
                        transcript.write("\n".join(format_item(data, own)) + "\n")
                        transcript.flush()
                        printed = int(data["seq"])
                    elif event == "approval":
                        # A call waits for a person: say how to decide, and keep watching.
                        transcript.write(approval_line(data) + "\n")
                        transcript.flush()
                    elif event == "end":
                        return _finish(session, data["run"], args, transcript, out)
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
        if args.json:
            _write_json(out, _run_view(session, run_id))
        raise CommandError(
            f"run {run_id} still running after {args.timeout:g} s (it goes on: toolpipe show {run_id})"
        )
    finally:
        session.close()


def _finish(
    session: "_Session | RemoteSession",
    record: dict[str, Any],
    args: argparse.Namespace,
    transcript: TextIO,
    out: TextIO,
) -> int:
    usage = record["usage"]
    transcript.write(
        f"status: {record['status']} · {usage['model_calls']} model call(s) · "
        f"{usage['prompt_tokens']} prompt + {usage['completion_tokens']} completion tokens\n"
    )
    if args.json:
        _write_json(out, _run_view(session, record["run_id"]))
    if record["status"] != "succeeded":
        raise CommandError(f"run {record['status']}: {record.get('error') or 'no reason recorded'}")
    return EXIT_OK


def show(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    session = _open_session(args)
    try:
        body = _run_view(session, args.run_id)
    finally:
        session.close()
    if args.json:
        _write_json(out, body)
        return EXIT_OK
    record = body["run"]
    out.write(
        f"run {record['run_id']} · agent {record['agent']} · {record['status']} · created {record['created_at']}\n"
    )
    for handoff in record.get("handoffs") or []:
        out.write(
            f"handoff after turn {handoff['turn']}: {handoff['from_agent']} -> {handoff['to_agent']}"
            f" ({handoff['kind']})\n"
        )
    for item in body["messages"]:
        out.write(
            "\n".join(
                f"[{item['seq']}] {line}" if i == 0 else f"    {line}"
                for i, line in enumerate(format_item(item, record["agent"]))
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
        # Part of the run's history, not this command's error: the command did what it was asked.
        out.write(f"error: {record['error']}\n")
    return EXIT_OK


def delete(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Delete an ended run, with its child runs, now (`DELETE /runs/{id}`)."""
    session = _open_session(args)
    try:
        status, body = session.request("DELETE", f"/runs/{args.run_id}")
    finally:
        session.close()
    if status in (404, 409):
        # Unknown or not the caller's (or deleted already); still running: cancel it first.
        raise CommandError(_reason(body))
    if status != 204:
        raise _refused(status, body)
    if args.json:
        _write_json(out, {"run_id": args.run_id, "deleted": True})
    else:
        out.write(f"deleted {args.run_id}\n")
    return EXIT_OK


APPROVAL_STATUSES = ("pending", "approved", "denied", "expired", "answered", "all")


def approval_line(approval: dict[str, Any]) -> str:
    """How a call that waits is announced while `run` watches: the id and the command (for a
    deferred call: the question and how to answer, or the request the program makes)."""
    kind = approval.get("kind", "approval")
    if kind == "human":
        form = " (a form: --value JSON)" if approval.get("result_schema") else ""
        return (
            f"  waiting for an answer: {approval['tool']} asks: {_short(approval.get('question') or '', 200)}"
            f' · answer with: toolpipe answer {approval["approval_id"]} "…"{form}'
        ) + _link_line("or answer in a browser", approval)
    if kind == "client":
        return (
            f"  waiting for your program: {approval['tool']}({_short(approval['arguments_preview'], 120)})"
            f" · post its result: POST /runs/{approval['run_id']}/calls/{approval['seq']}/result"
            ' {"result": …} (or {"error": "…"})'
        )
    line = (
        f"  waiting for approval: {approval['tool']}({_short(approval['arguments_preview'], 120)})"
        f" · approve with: toolpipe approve {approval['approval_id']}"
        f" (or: toolpipe deny {approval['approval_id']} --reason '…')"
    )
    # The signed link a person opens to approve, deny or edit (README "The approval link").
    return line + _link_line("or approve in a browser", approval)


def _link_line(words: str, approval: dict[str, Any]) -> str:
    """The call's signed link on a line of its own, when it has one (the API knew its URL)."""
    url = approval.get("callback_url")
    return f"\n  {words}: {_short(url, 2000)}" if isinstance(url, str) and url else ""


def approvals(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The approvals of the caller's runs (the admin principal's: everyone's), newest first."""
    session = _open_session(args)
    try:
        query = "" if args.status == "all" else f"?status={args.status}"
        status, body = session.request("GET", f"/approvals{query}")
    finally:
        session.close()
    if status != 200:
        raise _refused(status, body)
    if args.json:
        _write_json(out, body)
        return EXIT_OK
    for a in body["approvals"]:
        decided = f" by {a['decided_by']}" if a.get("decided_by") else ""
        reason = f": {_short(a['reason'], 200)}" if a.get("reason") else ""  # one line each
        kind = a.get("kind", "approval")
        # A question for a person reads as its question; the others as the call.
        what = (
            f"asks: {_short(a.get('question') or '', 80)}"
            if kind == "human"
            else f"{a['tool']}({_short(a['arguments_preview'], 80)})"
        )
        answer = f" {_short(a['answer_preview'], 80)}" if a.get("answer_preview") else ""
        out.write(
            f"{a['approval_id']}  {kind}  {a['status']}{decided}{reason}{answer}  {what}"
            f"  run {a['run_id']}  expires {a['expires_at']}\n"
        )
    if not body["approvals"]:
        err.write(f"no {'' if args.status == 'all' else args.status + ' '}approvals\n")
    return EXIT_OK


def _decide(args: argparse.Namespace, out: TextIO, action: str, body: Any) -> int:
    session = _open_session(args)
    try:
        status, answer = session.request("POST", f"/approvals/{args.approval_id}/{action}", body)
    finally:
        session.close()
    if status in (404, 409):
        # Unknown, not the caller's, or decided already: what was asked could not be done.
        raise CommandError(_reason(answer))
    if status != 200:
        raise _refused(status, answer)
    if args.json:
        _write_json(out, answer)
    else:
        out.write(f"{answer['status']} {answer['approval_id']} (run {answer['run_id']})\n")
    return EXIT_OK


def approve(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _decide(args, out, "approve", None if args.arguments is None else {"arguments": args.arguments})


def deny(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _decide(args, out, "deny", {"reason": args.reason})


def answer(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """A person's answer to a human-input call: free text, or `--value JSON` for a form's."""
    value = args.json_value if args.json_value is not _NO_JSON else args.text
    session = _open_session(args)
    try:
        status, body = session.request("POST", f"/approvals/{args.approval_id}/answer", {"answer": value})
    finally:
        session.close()
    if status in (404, 409):
        # Unknown, not the caller's, answered already, expired, or not a question.
        raise CommandError(_reason(body))
    if status != 200:
        raise _refused(status, body)
    if args.json:
        _write_json(out, body)
    else:
        out.write(f"answered {body['approval_id']} (run {body['run_id']}, call {body['seq']})\n")
    return EXIT_OK


# `--json` absent (None is a JSON value: `--json null`).
_NO_JSON = object()


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from e


def _approval_id(text: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{32}", text):
        raise argparse.ArgumentTypeError(f"not an approval id (32 hex digits): {text!r}")
    return text


def _arguments_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise argparse.ArgumentTypeError(f"--arguments is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--arguments must be a JSON object")
    return value


def _reason_text(text: str) -> str:
    if not text.strip() or len(text) > 1000:
        raise argparse.ArgumentTypeError("the reason is 1 to 1000 characters, not blank")
    return text


def _default_agent() -> str:
    from toolpipe.shared.agents import default_agent_name

    return default_agent_name()


def _describe_agents() -> list[dict[str, Any]]:
    """Your app's agents, in the order it defines them (the first is the default)."""
    from toolpipe.shared.agents import all_agents, transfer_specs

    return [
        {
            "name": agent.name,
            "model": agent.model,
            "instructions": agent.instructions,
            "tools": [
                *({"name": t.name, "description": t.description} for t in agent.tools),
                # The handoffs, as the model sees them: `transfer_to_<agent>` tools.
                *(
                    {"name": spec["function"]["name"], "description": spec["function"]["description"]}
                    for spec in transfer_specs(agent)
                ),
            ],
            # Listed at run time (an MCP server): naming them here would mean reaching the server.
            "tool_sources": [source.name for source in agent.tool_sources],
        }
        for agent in all_agents()
    ]


def agents(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`toolpipe agents`: the agents `--agent` can name, with their tools (read locally, no server)."""
    described = _describe_agents()
    if not described:
        from toolpipe.shared.agents import NO_AGENTS

        raise CommandError(NO_AGENTS, EXIT_USAGE)
    if args.json:
        _write_json(out, {"agents": described})
        return EXIT_OK
    for agent in described:
        model = agent["model"] or "the default model"
        out.write(f"{agent['name']} ({model}): {_short(agent['instructions'], 120)}\n")
        width = max((len(t["name"]) for t in agent["tools"]), default=0)
        for t in agent["tools"]:
            first_line = (t["description"] or "").strip().splitlines()[:1]
            out.write(f"  {t['name']:<{width}}  {_short(first_line[0] if first_line else '', 100)}\n")
        for source in agent["tool_sources"]:
            out.write(f"  (and the tools of tool source '{source}', listed when a run starts)\n")
    return EXIT_OK


def invoke(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Feed an event file to one real handler on the local runtime; RUN_ID in it is replaced.

    A Step Functions status-change event reaches the orchestrator as the stack's rule
    transforms it; `--object FILE` first puts FILE as the object an S3 notification names
    (without the bucket's own notification, so only the sample starts a run). stdout gets the
    handler's result as JSON, or Lambda's error payload (`errorType`, `errorMessage`) and exit 1."""
    from toolpipe.infra.definition import EXECUTION_ENDED_DETAIL_TYPE, execution_ended_request
    from toolpipe.infra.local.logfile import logs_to_file, record_traceback

    text = args.event.read_text()
    if args.run_id:
        text = text.replace("RUN_ID", args.run_id)
    event = json.loads(text)  # JSON before (checked while parsing), and a run id has no quote
    if args.function == "orchestrator" and event.get("detail-type") == EXECUTION_ENDED_DETAIL_TYPE:
        event = execution_ended_request(event)
    home = _state_dir()
    # This command holds the folder's state itself: with a server serving it too, whichever
    # saved last would erase the other's runs.
    lock = try_lock(home)
    if lock is None:
        info = read_server_file(home)
        where = f" at {info.url}" if info else ""
        raise CommandError(
            f"a toolpipe server{where} is serving {home}: stop it first, or set TOOLPIPE_HOME", EXIT_USAGE
        )
    try:
        with logs_to_file(home, echo=err if args.verbose else None):
            result, failure = _invoke_in_runtime(args, event, home, err)
    finally:
        os.close(lock)
    _write_json(out, result)
    if failure is not None:
        logged = record_traceback(home, "invoke", failure)
        if args.verbose:
            err.write("".join(traceback.format_exception(failure)))
        raise CommandError(
            f"{args.function} raised {type(failure).__name__}: {failure}"
            + (f" (traceback in {logged})" if logged else "")
        )
    return EXIT_OK


def _invoke_in_runtime(
    args: argparse.Namespace, event: Any, home: Path, err: TextIO
) -> tuple[Any, Exception | None]:
    from toolpipe.infra.local import triggers
    from toolpipe.infra.local.lambdas import call_function
    from toolpipe.infra.local.runtime import LocalRuntime

    # Workers run too: a run the event starts finishes before the runtime shuts down.
    with _model_endpoint() as model, LocalRuntime(state_dir=home) as runtime:
        err.write(f"model endpoint: {model}\n")
        if args.object:
            for record in event.get("Records", []):
                key = urllib.parse.unquote_plus(record["s3"]["object"]["key"])
                # The sample's eTag and size are its own file's: the notification tells of this put.
                record["s3"]["object"].update(triggers.put_quietly(runtime.s3, key, args.object.read_bytes()))
        try:
            return call_function(FUNCTIONS[args.function], event), None
        except Exception as e:  # the function's error, as Lambda reports it to whoever invoked it
            return {"errorType": type(e).__name__, "errorMessage": str(e)}, e


def serve(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`toolpipe serve`: one process holding the runtime and answering HTTP until a signal.

    stdout: where it serves (text lines, or one JSON document with `--json`) once ready."""
    from toolpipe.infra.local.client import remove_server_file
    from toolpipe.infra.local.logfile import logs_to_file

    home = _state_dir()
    aws_port = _aws_port(args)
    if aws_port and aws_port == args.port:
        raise CommandError(
            f"--aws-port {aws_port} is the API's port: choose another, or 0 for a free one", EXIT_USAGE
        )
    # Locally the caller is the user, on 127.0.0.1: a run may name its own MCP servers
    # (`toolpipe run --mcp URL`). Reachable from elsewhere, or deployed, that stays off unless
    # turned on: otherwise anyone who reaches the port could make the workers call any URL.
    if args.host in LOOPBACK:
        os.environ.setdefault("TOOLPIPE_ALLOW_RUN_MCP_SERVERS", "1")
    lock = _take_lock(home)
    if lock is None:
        info = read_server_file(home)
        where = f" at {info.url}" if info else ""
        # 2, which `connect` (infra/local/client.py) reads as "another client's server won the lock".
        raise CommandError(f"a toolpipe server{where} is already serving {home}", EXIT_USAGE)
    try:
        for option, port in (("--port", args.port), ("--aws-port", aws_port)):
            if port is None:
                continue
            try:
                # Before the runtime starts: it would resume the folder's runs only to stop them.
                # Port 0 too: a host that does not resolve or is not this machine's fails here.
                socket.create_server((args.host, port)).close()
            except OSError as e:
                reason = e.strerror or str(e)
                hint = f" ({option} 0 picks a free one)" if port else ""
                raise CommandError(f"cannot serve on {args.host}:{port}: {reason}{hint}") from None
        if args.host not in LOOPBACK:
            err.write(
                f"toolpipe: warning: serving on {args.host}: anyone who reaches it can act as any caller "
                "(the X-Toolpipe-Caller header stands in for IAM) and, through the AWS endpoint, "
                "read and change all local state (it accepts any credentials)\n"
            )
        with logs_to_file(home, echo=err if args.verbose else None):
            _serve_runtime(args, out, home, aws_port)
        err.write(f"stopped; state saved in {home}\n")
    finally:
        remove_server_file(home, os.getpid())
        os.close(lock)  # only now: the state is saved
    _exit_past_stray_threads(err)
    return EXIT_OK


def _exit_past_stray_threads(err: TextIO) -> None:
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


def _serve_runtime(args: argparse.Namespace, out: TextIO, home: Path, aws_port: int) -> None:
    from toolpipe.infra.local.client import ServerInfo, remove_server_file, write_server_file
    from toolpipe.infra.local.runtime import LocalRuntime
    from toolpipe.infra.local.server import LocalServer, serve_until_stopped

    stop, hurry = threading.Event(), threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        # The first Ctrl-C drains (runs in progress end); a second one stops them now.
        (hurry if stop.is_set() else stop).set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    with _model_endpoint() as model, LocalRuntime(state_dir=home) as runtime:
        health = {
            "pid": os.getpid(),
            "home": str(home),
            "model": os.environ.get("TOOLPIPE_MODEL"),
            "app": os.environ.get(APP_ENV),
        }
        from toolpipe.infra.local.aws_endpoint import AwsEndpoint  # after the runtime: its own cost only

        option, port = "--aws-port", aws_port
        try:
            aws = AwsEndpoint(args.host, aws_port)
            option, port = "--port", args.port
            server = LocalServer(
                runtime, args.host, args.port, {**health, "aws_endpoint": aws.url, "model_endpoint": model}
            )
        except OSError as e:
            if option == "--port":
                aws.close()
            raise CommandError(
                f"cannot serve on {args.host}:{port}: {e.strerror} ({option} 0 picks a free one)"
            ) from None
        # The AWS endpoint outlives the API server's drain: tools still read and write while
        # the runs in progress end.
        with aws, server:
            started = datetime.now(UTC).isoformat(timespec="seconds")
            write_server_file(home, ServerInfo(server.url, os.getpid(), started, aws_endpoint=aws.url))
            # Triggers (README "Triggers"): a file put here, or an event put on the bus, starts a run.
            trigger = f"s3://{runtime.trigger_bucket}/{runtime.trigger_prefix}"
            ready = time.monotonic() - _STARTED
            if args.json:
                served = {
                    "api_url": server.api_url,
                    "url": server.url,
                    "aws_endpoint": aws.url,
                    "s3_trigger": trigger,
                    "event_bus": runtime.event_bus_name,
                    "model_endpoint": model,
                    "home": str(home),
                    "pid": os.getpid(),
                    "ready_seconds": round(ready, 2),
                }
                out.write(json.dumps(served) + "\n")
            else:
                out.write(f"model endpoint: {model}\n")
                out.write(f"AWS endpoint: {aws.url}\n")
                out.write(f"S3 trigger: {trigger}\n")
                out.write(f"EventBridge bus: {runtime.event_bus_name}\n")
                out.write(
                    f"toolpipe server at {server.api_url} · state {home} · ready in "
                    f"{ready:.1f} s · Ctrl-C stops it\n"
                )
            out.flush()
            try:
                serve_until_stopped(runtime, server, stop, hurry, args.idle_exit, also_serving=[aws])
            finally:
                # Gone before the state is saved: a client that comes now waits for the lock,
                # then starts a server that reads that state.
                remove_server_file(home, os.getpid())


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


# Argument types: argparse calls them while parsing, so bad input is refused (exit 2, with the
# usage line) before a server, a runtime or a run starts. What the API also checks is checked by
# the API's own request model (shared.messages.StartRunRequest), so the two never disagree.


def _request_error(**fields: Any) -> str | None:
    """Why `POST /runs` would refuse these fields (the first reason), or None."""
    from pydantic import ValidationError

    from toolpipe.shared.messages import StartRunRequest

    try:
        StartRunRequest.model_validate({"input": "-", **fields})
    except ValidationError as e:
        return str(e.errors()[0]["msg"])
    return None


def _prompt(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the prompt is blank")
    if reason := _request_error(input=text):
        raise argparse.ArgumentTypeError(reason)
    return text


def _timezone(text: str) -> str:
    if reason := _request_error(timezone=text):
        raise argparse.ArgumentTypeError(reason)
    return text


def _agent(name: str) -> str:
    from toolpipe.shared.agents import get_agent
    from toolpipe.shared.errors import UnknownAgentError

    if _remote:  # a deployed stack's agents are its app's, not this folder's: it answers itself
        if _request_error(agent=name) is not None:
            raise argparse.ArgumentTypeError(f"not an agent name: {name!r}")
        return name
    try:
        get_agent(name)
    except UnknownAgentError as e:
        raise argparse.ArgumentTypeError(f"{e}; `toolpipe agents` lists them with their tools") from None
    except ConfigurationError as e:  # the app could not be loaded: why, in one line
        raise argparse.ArgumentTypeError(str(e)) from None
    return name


def _mcp_url(text: str) -> str:
    if _request_error(mcp_servers=[text]) is not None:
        raise argparse.ArgumentTypeError(f"not an http(s) URL: {text!r}")
    return text


def _model_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the model name is blank")
    return text


def _default_timezone(err: TextIO) -> str:
    """`TZ` when it names an IANA zone (it may hold a POSIX rule such as `CET-1CEST`), else UTC."""
    zone = os.environ.get("TZ", "").removeprefix(":")
    if not zone:
        return "UTC"
    if _request_error(timezone=zone) is not None:
        err.write(f"toolpipe: warning: TZ={zone!r} is not an IANA time zone; using UTC (see --timezone)\n")
        return "UTC"
    return zone


def _seconds(limit: float | None) -> Any:
    def parse(text: str) -> float:
        try:
            seconds = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if limit is None and not 0 < seconds < float("inf"):  # also refuses nan
            raise argparse.ArgumentTypeError(f"must be a positive, finite number of seconds, not {text}")
        if limit is not None and not 0 < seconds <= limit:  # also refuses nan and inf
            raise argparse.ArgumentTypeError(f"must be more than 0 and at most {limit:g} seconds, not {text}")
        return seconds

    return parse


# Checked before anything starts: a run must not be left behind by a wait that cannot be. The
# event stream waits an hour at most.
_wait_seconds = _seconds(3600)


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a port (0-65535): {text!r}")
    return int(text)


def _run_id(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", text):
        raise argparse.ArgumentTypeError(f"not a run id: {text!r}")
    return text


def _event_file(text: str) -> Path:
    path = Path(text)
    try:
        json.loads(path.read_text())
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot read {text}: {e.strerror}") from None
    except ValueError as e:  # UnicodeDecodeError too
        raise argparse.ArgumentTypeError(f"{text} is not a JSON event: {e}") from None
    return path


def _readable_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file() or not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"not a readable file: {text}")
    return path


def _folder(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("the folder name is blank")
    return Path(text)


def _api_url(text: str) -> str:
    """A deployed API's URL, checked before credentials or the network are looked at."""
    text = text.strip()
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018  # raises on a port that is not a number
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a URL: {text!r} ({e})") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"not an http(s) URL of an API: {text!r} (its ApiUrl output)")
    return text


def _add_api_arguments(command: argparse.ArgumentParser) -> None:
    from toolpipe.infra.remote import API_KEY_ENV, API_URL_ENV

    command.add_argument(
        "--api",
        metavar="URL",
        type=_api_url,
        default=os.environ.get(API_URL_ENV, "").strip() or None,
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


Command = Callable[[argparse.Namespace, TextIO, TextIO], int]  # (args, stdout, stderr) -> exit status


def _parser(out: TextIO, err: TextIO, json_errors: bool) -> argparse.ArgumentParser:
    class Parser(argparse.ArgumentParser):
        def print_help(self, file: Any = None) -> None:  # --help is what was asked for: stdout
            super().print_help(file or out)

        def error(self, message: str) -> Any:  # argparse's documented hook; must not return
            if json_errors:
                err.write(json.dumps({"error": f"{self.prog}: {message}", "exit_code": EXIT_USAGE}) + "\n")
            else:
                self.print_usage(err)
                err.write(f"{self.prog}: error: {message}\n")
            raise SystemExit(EXIT_USAGE)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    common.add_argument("--app", metavar="MODULE", help=APP_HELP)
    common.add_argument(
        "--verbose", action="store_true", help="also print logs on stderr (they always go to toolpipe.log)"
    )
    options: dict[str, Any] = {
        "parents": [common],
        "epilog": EPILOG,
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }
    parser = Parser(
        prog="toolpipe",
        description="Run toolpipe agents on the local runtime.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--app", metavar="MODULE", help=APP_HELP)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init_parser = commands.add_parser(
        "init", help="create a project of your own: agents, a test, a CDK app", **options
    )
    init_parser.add_argument("directory", type=_folder, help="the project's folder (created if missing)")
    init_parser.add_argument("--package", help="its Python package (default: from the folder's name)")

    run_parser = commands.add_parser("run", help="run an agent on a prompt and print each step", **options)
    run_parser.add_argument("prompt", type=_prompt, help="the user's message (not blank)")
    run_parser.add_argument(
        "--agent",
        type=_agent,
        help="the agent to run (default: the first your app defines); `toolpipe agents` lists the "
        "agents and their tools",
    )
    run_parser.add_argument(
        "--model", type=_model_name, help="model name (default: TOOLPIPE_MODEL or gpt-4o-mini)"
    )
    run_parser.add_argument(
        "--timezone",
        type=_timezone,
        help="the user's IANA time zone, e.g. Europe/Paris (default: TZ if it names one, else UTC)",
    )
    run_parser.add_argument(
        "--timeout", type=_wait_seconds, default=300.0, help="seconds to wait for the run (0-3600]"
    )
    run_parser.add_argument(
        "--mcp",
        type=_mcp_url,
        action="append",
        metavar="URL",
        help="also offer this MCP server's tools (mcp_<tool>)",
    )

    show_parser = commands.add_parser("show", help="print a run's history", **options)
    show_parser.add_argument("run_id", type=_run_id)
    delete_parser = commands.add_parser(
        "delete", help="delete an ended run and its child runs now (every item and stored object)", **options
    )
    delete_parser.add_argument("run_id", type=_run_id)
    approvals_parser = commands.add_parser(
        "approvals", help="list the tool calls that wait for your approval (and decided ones)", **options
    )
    approvals_parser.add_argument(
        "--status", choices=APPROVAL_STATUSES, default="pending", help="which approvals (default: pending)"
    )
    approve_parser = commands.add_parser("approve", help="approve a call that waits: it runs", **options)
    approve_parser.add_argument("approval_id", type=_approval_id)
    approve_parser.add_argument(
        "--arguments",
        type=_arguments_object,
        metavar="JSON",
        help="run the call with these arguments instead of the model's (a JSON object; the tool "
        "checks them, and the model is told)",
    )
    deny_parser = commands.add_parser(
        "deny", help="deny a call that waits, with a reason the model reads", **options
    )
    deny_parser.add_argument("approval_id", type=_approval_id)
    deny_parser.add_argument("--reason", type=_reason_text, required=True, help="why (the model reads it)")
    answer_parser = commands.add_parser(
        "answer", help="answer a question a tool call asks you (a human-input tool)", **options
    )
    answer_parser.add_argument("approval_id", type=_approval_id)
    given = answer_parser.add_mutually_exclusive_group(required=True)
    given.add_argument("text", nargs="?", help="your answer, as free text")
    # `--value`, not `--json`: every command's `--json` prints its output as JSON.
    given.add_argument(
        "--value",
        dest="json_value",
        type=_json_value,
        default=_NO_JSON,
        metavar="JSON",
        help="your answer as a JSON value, for a question with a form (result schema)",
    )
    for remote in (
        run_parser,
        show_parser,
        delete_parser,
        approvals_parser,
        approve_parser,
        deny_parser,
        answer_parser,
    ):
        _add_api_arguments(remote)

    commands.add_parser("agents", help="list the agents and their tools", **options)

    invoke_parser = commands.add_parser(
        "invoke", help="run one handler on an event file (see events/); prints its JSON result", **options
    )
    invoke_parser.add_argument("function", choices=sorted(FUNCTIONS))
    invoke_parser.add_argument(
        "event", type=_event_file, help="path of a JSON event, e.g. events/api_post_run.json"
    )
    invoke_parser.add_argument("--run-id", type=_run_id, help="replaces RUN_ID in the event")
    invoke_parser.add_argument(
        "--object",
        type=_readable_file,
        metavar="FILE",
        help="triggers: put FILE as the object an S3 notification names, first",
    )

    serve_parser = commands.add_parser(
        "serve", help="serve the local runtime over HTTP until Ctrl-C", **options
    )
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
        type=_seconds(None),
        metavar="SECONDS",
        help="stop after this long with no request and no run in progress (default: never)",
    )
    return parser


APP_HELP = (
    "your module that defines the agents (default: TOOLPIPE_APP, else [tool.toolpipe] app in the "
    "nearest pyproject.toml)"
)


_remote = False  # this command talks to a deployed API (--api): its agents are not this folder's


def _name_the_app(arguments: list[str]) -> None:
    """Find the app once, here, and hand it on through the environment: to this process's
    handlers and to a server it starts (which may run from another folder). `init` and a
    command for a deployed API need none."""
    from toolpipe.infra.remote import API_URL_ENV

    global _remote
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--app")
    early.add_argument("--api", default=os.environ.get(API_URL_ENV) or None)
    early.add_argument("command", nargs="?")
    known, _ = early.parse_known_args(arguments)
    _remote = bool(known.api)
    if known.command == "init" or _remote:
        return
    ref = AppRef(valid_module_name(known.app.strip(), "--app"), os.getcwd()) if known.app else find_app()
    if ref is not None:
        use_app(ref)


def init(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """`toolpipe init DIR`: a project of your own (infra/scaffold.py)."""
    from toolpipe.infra.scaffold import ScaffoldError, init_project

    try:
        written = init_project(args.directory, args.package)
    except ScaffoldError as e:
        raise CommandError(str(e), EXIT_USAGE) from None
    if args.json:
        _write_json(out, {"directory": str(args.directory), "files": [str(p) for p in written]})
        return EXIT_OK
    out.write(f"created {len(written)} files in {args.directory}:\n")
    out.writelines(f"  {path.relative_to(args.directory)}\n" for path in written)
    err.write(f"next: cd {shlex.quote(str(args.directory))} && pip install -e '.[dev]' && pytest\n")
    return EXIT_OK


# One entry per command: a new command (a remote client, say) is a function and a line here.
COMMANDS: dict[str, Command] = {
    "init": init,
    "run": run,
    "show": show,
    "delete": delete,
    "approvals": approvals,
    "approve": approve,
    "deny": deny,
    "answer": answer,
    "agents": agents,
    "invoke": invoke,
    "serve": serve,
}


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """The `toolpipe` command; returns its exit status (argparse raises SystemExit(2) itself)."""
    raw_out = out or sys.stdout
    raw_err = err or sys.stderr
    arguments = sys.argv[1:] if argv is None else argv
    # Known before parsing, so that argparse's own errors come as JSON too.
    json_errors = "--json" in arguments
    out, err = cast(TextIO, _Visible(raw_out)), cast(TextIO, _Visible(raw_err))
    try:
        # Before parsing: `--agent` is checked against the app's agents as it is parsed.
        _name_the_app(arguments)
    except ConfigurationError as e:
        return _fail(err, str(e), EXIT_USAGE, json_errors)
    parser = _parser(out, err, json_errors)
    args = parser.parse_args(arguments)
    if getattr(args, "api_key", None) and not getattr(args, "api", None):
        parser.error("--api-key (or TOOLPIPE_API_KEY) goes with --api (or TOOLPIPE_API_URL)")
    if getattr(args, "api", None) and getattr(args, "model", None):
        parser.error(
            "--model applies to the local server: a deployed stack's model is set when deploying (-c model_name=…)"
        )
    if args.command == "run" and args.timezone is None:
        args.timezone = _default_timezone(err)
    try:
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
    except CommandError as e:
        return _fail(err, str(e), e.code, json_errors)
    except ConfigurationError as e:  # the app or a setting: the user's to fix
        return _fail(err, str(e), EXIT_USAGE, json_errors)
    except ServerError as e:  # the local server could not be found, started or reached: said in one line
        return _fail(err, str(e), EXIT_FAILED, json_errors)
    except KeyboardInterrupt:
        return _fail(err, "interrupted", EXIT_INTERRUPTED, json_errors)
    except Exception as e:  # a user sees one line, never a traceback: that goes to the log
        from toolpipe.infra.local.logfile import record_traceback

        where = record_traceback(_state_dir(), args.command, e)
        if args.verbose:
            with contextlib.suppress(OSError):
                err.write("".join(traceback.format_exception(e)))
        detail = f" (traceback in {where})" if where else ""
        return _fail(err, f"{type(e).__name__}: {e}{detail}", EXIT_FAILED, json_errors)


def _fail(err: TextIO, message: str, code: int, as_json: bool) -> int:
    message = " ".join(message.split())  # one line, whatever the exception's message held
    line = json.dumps({"error": message, "exit_code": code}) if as_json else f"toolpipe: error: {message}"
    with contextlib.suppress(OSError):  # stderr may be a closed pipe too
        err.write(line + "\n")
        err.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
