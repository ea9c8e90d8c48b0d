"""A local server process for the durability tests: `LocalRuntime(state_dir=...)` with a rule-driven
scripted model and slow tools, which a test kills with SIGKILL and starts again.

    python -m tests.e2e.durable_app start  STATE_DIR MARKS PROMPT   # prints "run <id>", then serves
    python -m tests.e2e.durable_app serve  STATE_DIR MARKS          # resumes, prints "ready", serves
    python -m tests.e2e.durable_app finish STATE_DIR MARKS RUN_ID   # resumes, prints "result <json>"
    python -m tests.e2e.durable_app fork   STATE_DIR MARKS AGENT    # a run fails after turn 1:
        prints "run <id>" and "ended <status>", forks it at turn 1, prints "fork <id>", serves
    python -m tests.e2e.durable_app resume STATE_DIR MARKS AGENT    # a run ends `limit`: prints
        "run <id>" and "ended <status>", resumes it with its limit raised, prints "resumed", serves

Every tool start and end is printed ("mark start charge_card") and appended to MARKS, so a test
can wait for one without polling and count, across processes, how often each tool really ran.
`TOOL_SECONDS` sets how long the slow tools take.
"""

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from toolpipe.infra.local.runtime import LOCAL_CALLER, LocalRuntime
from toolpipe.infra.local.scripted_model import Answer, Reply, ScriptedModelServer
from toolpipe.shared.agents import AGENTS, Agent, agent_tool
from toolpipe.shared.tools import tool

_MARKS = Path(sys.argv[3]) if len(sys.argv) > 3 else Path(os.devnull)
_print_lock = threading.Lock()
# Bounds how long a served process lives if no test kills it.
SERVE_SECONDS = 120


def mark(event: str, name: str) -> None:
    with _print_lock:
        fd = os.open(_MARKS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{event} {name}\n".encode())
        os.close(fd)
        print(f"mark {event} {name}", flush=True)


def _slow(name: str) -> None:
    mark("start", name)
    time.sleep(float(os.environ.get("TOOL_SECONDS", "0.1")))
    mark("end", name)


@tool
def quick(label: str) -> str:
    """Answer at once.

    Args:
        label: Any text.
    """
    mark("start", "quick")
    mark("end", "quick")
    return f"quick {label}"


@tool
def charge_card(cents: int) -> str:
    """Charge the card: not safe to repeat.

    Args:
        cents: The amount.
    """
    _slow("charge_card")
    return f"charged {cents}"


@tool(idempotent=True)
def fetch_page(url: str) -> str:
    """Fetch a page: safe to repeat.

    Args:
        url: The page.
    """
    _slow("fetch_page")
    return f"fetched {url}"


@tool
def refuse(reason: str) -> str:
    """Always fail.

    Args:
        reason: Why.
    """
    raise RuntimeError(reason)


WORKER = Agent(
    name="durable",
    instructions="You test restarts.",
    tools=[quick, charge_card, fetch_page],
    tool_timeout_seconds=None,
)
BOSS = Agent(name="boss", instructions="You delegate.", tools=[agent_tool("durable")])
# One model turn: the run ends `limit` after `quick`, until a resume raises max_iterations.
STEPWISE = Agent(
    name="stepwise",
    instructions="You test resumes.",
    tools=[quick, charge_card, fetch_page],
    tool_timeout_seconds=None,
    max_iterations=1,
)


# Fails after turn 1 (`refuse` under on_tool_error="fail"), `quick` done: a fork goes on from there.
FORKY = Agent(
    name="forky",
    instructions="You test forks.",
    tools=[quick, charge_card, fetch_page, refuse],
    tool_timeout_seconds=None,
    on_tool_error="fail",
)


def respond(request: dict[str, Any]) -> Answer:
    """The model, by rules (a restarted process asks it again from wherever the run stands)."""
    messages = request["messages"]
    last = messages[-1]
    results = [m["content"] for m in messages if m["role"] == "tool"]
    if FORKY.instructions in messages[0]["content"] and len(results) < 4:
        if not results:
            return Reply(tool_calls=[("quick", {"label": "a"}), ("refuse", {"reason": "no"})])
        return Reply(tool_calls=[("charge_card", {"cents": 500}), ("fetch_page", {"url": "u"})])
    if STEPWISE.instructions in messages[0]["content"] and len(results) < 3:
        if not results:
            return Reply(tool_calls=[("quick", {"label": "a"})])
        return Reply(tool_calls=[("charge_card", {"cents": 500}), ("fetch_page", {"url": "u"})])
    if last["role"] == "tool":
        return Reply(content="all done: " + "; ".join(m["content"] for m in messages if m["role"] == "tool"))
    if BOSS.instructions in messages[0]["content"]:
        return Reply(tool_calls=[("durable", {"task": "do the work"})])
    return Reply(
        tool_calls=[("quick", {"label": "a"}), ("charge_card", {"cents": 500}), ("fetch_page", {"url": "u"})]
    )


def main() -> int:
    mode, state_dir = sys.argv[1], Path(sys.argv[2])
    AGENTS[WORKER.name] = WORKER
    AGENTS[BOSS.name] = BOSS
    AGENTS[STEPWISE.name] = STEPWISE
    AGENTS[FORKY.name] = FORKY
    with ScriptedModelServer(respond) as model:
        env = {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "scripted"}
        with LocalRuntime(state_dir=state_dir, extra_env=env) as runtime:
            runtime.drain_seconds = 0  # a clean exit here ends nothing that a test still waits on
            if mode in ("resume", "fork"):
                status, body = runtime.api("POST", "/runs", {"prompt": "go", "agent": sys.argv[4]})
                assert status == 202, body
                run_id = body["run_id"]
                print(f"run {run_id}", flush=True)
                runtime.wait_for_execution(run_id, timeout=60)
                _, run = runtime.api("GET", f"/runs/{run_id}", caller=LOCAL_CALLER)
                print(f"ended {run['run']['status']}", flush=True)
            if mode == "fork":
                asked = {"turn": 1, "input": "go on without refusing"}
                status, body = runtime.api("POST", f"/runs/{run_id}/fork", asked, caller=LOCAL_CALLER)
                assert status == 202, body
                print(f"fork {body['run_id']}", flush=True)
            if mode == "resume":
                limits = {"limits": {"max_iterations": 3}}
                status, body = runtime.api("POST", f"/runs/{run_id}/resume", limits, caller=LOCAL_CALLER)
                assert status == 202, body
                print(f"resumed {json.dumps(body)}", flush=True)
            if mode == "start":
                status, body = runtime.api("POST", "/runs", {"prompt": "go", "agent": sys.argv[4]})
                assert status == 202, body
                print(f"run {body['run_id']}", flush=True)
            print(f"ready {json.dumps(runtime.resumed)}", flush=True)
            if mode == "finish":
                run_id = sys.argv[4]
                runtime.wait_for_execution(run_id, timeout=60)
                _, run = runtime.api("GET", f"/runs/{run_id}", caller=LOCAL_CALLER)
                _, listed = runtime.api("GET", f"/runs/{run_id}/messages", caller=LOCAL_CALLER)
                print(f"result {json.dumps({**run, 'messages': listed['messages']})}", flush=True)
                return 0
            time.sleep(SERVE_SECONDS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
