"""`toolpipe run "PROMPT"` and `toolpipe show RUN_ID`, on the local runtime.

With no `OPENAI_BASE_URL` set, a scripted OpenAI-compatible model is served on 127.0.0.1
so a run works offline through the same client code as with a real endpoint.
"""

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

RUNNING = "running"


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
def _model_endpoint(out: TextIO) -> Iterator[None]:
    if os.environ.get("OPENAI_BASE_URL"):
        out.write(f"model endpoint: {os.environ['OPENAI_BASE_URL']}\n")
        yield
        return
    from infra.local.scripted_model import DemoResponder, ScriptedModelServer

    with ScriptedModelServer(DemoResponder()) as server:
        out.write(
            f"model endpoint: scripted demo model at {server.base_url} (set OPENAI_BASE_URL for a real one)\n"
        )
        previous = {k: os.environ.get(k) for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
        os.environ["OPENAI_BASE_URL"] = server.base_url
        os.environ["OPENAI_API_KEY"] = "scripted"
        try:
            yield
        finally:
            for k, v in previous.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _messages(runtime: Any, run_id: str, after: int = 0) -> list[dict[str, Any]]:
    """Every history item after seq `after`, page by page (long contents are previews)."""
    items: list[dict[str, Any]] = []
    page: str | None = f"/runs/{run_id}/messages?after={after}"
    while page:
        status, body = runtime.api("GET", page)
        if status != 200:
            raise RuntimeError(body.get("message", body) if isinstance(body, dict) else body)
        items.extend(body["messages"])
        page = body["next"]
    return items


def run(args: argparse.Namespace, out: TextIO) -> int:
    from infra.local.runtime import LocalRuntime

    if args.model:
        os.environ["TOOLPIPE_MODEL"] = args.model
    request = {"prompt": args.prompt, "agent": args.agent, "timezone": args.timezone}
    if args.mcp:
        # Locally, the caller is the user: let this run name its own MCP servers.
        os.environ["TOOLPIPE_ALLOW_RUN_MCP_SERVERS"] = "1"
        request["mcp_servers"] = args.mcp
    with _model_endpoint(out), LocalRuntime(state_dir=_state_dir()) as runtime:
        status, body = runtime.api("POST", "/runs", request)
        if status != 202:
            out.write(f"error: {body.get('message', body) if isinstance(body, dict) else body}\n")
            return 2
        run_id = body["run_id"]
        out.write(f"run {run_id} (agent {args.agent})\n")
        printed = 0  # the last seq printed
        deadline = time.monotonic() + args.timeout
        while True:
            _, state = runtime.api("GET", f"/runs/{run_id}")
            record = state["run"]
            ended = record["status"] != RUNNING
            for item in _messages(runtime, run_id, after=printed):
                # Parallel results land in any order: while the run goes on, print only up to
                # the first slot still empty, so the cursor never skips one.
                if not ended and item["seq"] != printed + 1:
                    break
                out.write("\n".join(format_item(item)) + "\n")
                out.flush()
                printed = item["seq"]
            if ended:
                break
            if time.monotonic() > deadline:
                out.write(f"error: run {run_id} still running after {args.timeout:g} s\n")
                return 1
            time.sleep(0.05)
        runtime.wait_for_execution(run_id, timeout=30)
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
    from infra.local.runtime import LocalRuntime

    with LocalRuntime(state_dir=_state_dir(), workers=0) as runtime:
        status, body = runtime.api("GET", f"/runs/{args.run_id}")
        if status == 200:
            executions = list(body["executions"])
            while body["executions_next"]:
                _, body = runtime.api("GET", body["executions_next"])
                executions.extend(body["executions"])
            body = {**body, "executions": executions, "messages": _messages(runtime, args.run_id)}
    if status != 200:
        out.write(f"error: {body.get('message', body) if isinstance(body, dict) else body}\n")
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


HANDLERS = {
    "api": ("functions.api.handler.lambda_handler", 29),
    "orchestrator": ("functions.orchestrator.handler.lambda_handler", 300),
    "tool_worker": ("functions.tool_worker.handler.lambda_handler", 120),
}


def invoke(args: argparse.Namespace, out: TextIO) -> int:
    """Feed an event file to one real handler on the local runtime; RUN_ID in it is replaced."""
    from infra.local.lambdas import LocalContext, call_handler
    from infra.local.runtime import LocalRuntime

    text = Path(args.event).read_text()
    if args.run_id:
        text = text.replace("RUN_ID", args.run_id)
    event = json.loads(text)
    handler, timeout = HANDLERS[args.function]
    # Workers run too: a run the event starts finishes before the runtime shuts down.
    with _model_endpoint(out), LocalRuntime(state_dir=_state_dir()):
        result = call_handler(
            handler, event, LocalContext(function_name=args.function, timeout_seconds=timeout)
        )
    out.write(json.dumps(result, indent=2) + "\n")
    return 0


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
    run_parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the run")
    run_parser.add_argument(
        "--mcp", action="append", metavar="URL", help="also offer this MCP server's tools (mcp_<tool>)"
    )
    show_parser = commands.add_parser("show", help="print a run's history")
    show_parser.add_argument("run_id")
    show_parser.add_argument("--json", action="store_true", help="print the API's JSON")
    invoke_parser = commands.add_parser("invoke", help="run one handler on an event file (see events/)")
    invoke_parser.add_argument("function", choices=sorted(HANDLERS))
    invoke_parser.add_argument("event", help="path of a JSON event, e.g. events/api_post_run.json")
    invoke_parser.add_argument("--run-id", help="replaces RUN_ID in the event")
    args = parser.parse_args(argv)
    commands_by_name = {"run": run, "show": show, "invoke": invoke}
    try:
        return commands_by_name[args.command](args, out)
    except KeyboardInterrupt:
        out.write("interrupted\n")
        return 130
    except Exception as e:  # a user sees one line, never a traceback
        out.write(f"error: {type(e).__name__}: {e}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
