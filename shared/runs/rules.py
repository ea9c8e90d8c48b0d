"""When a run ends, and with what: the limits, failure policies and answer shapes, as pure
functions of the agent, the run record and the history."""

import json
import re

from toolpipe.shared.agents import Agent
from toolpipe.shared.errors import ERROR_PREFIX, ErrorKind
from toolpipe.shared.messages import (
    AssistantMessage,
    DecisionStatus,
    HistoryItem,
    RunRecord,
    RunStatus,
    ToolResult,
    Usage,
    UserMessage,
)


def tool_failure(agent: Agent, reply: AssistantMessage, history: list[HistoryItem]) -> str | None:
    """With `on_tool_error="fail"`, the first tool of the last turn that raised ends the run."""
    if agent.on_tool_error != "fail":
        return None
    for item in history:
        if (
            isinstance(item, ToolResult)
            and item.turn == reply.turn
            and item.error_type is ErrorKind.TOOL_FAILED
        ):
            return (item.error_detail or item.content).removeprefix(ERROR_PREFIX)
    return None


def direct_results(agent: Agent, reply: AssistantMessage, history: list[HistoryItem]) -> list[ToolResult]:
    """Results of `return_direct` tools in the last turn: together, they are the run's answer."""
    return [
        item
        for item in history
        if isinstance(item, ToolResult)
        and item.turn == reply.turn
        and item.status == "ok"
        and item.tool in agent.registry
        and agent.registry.get(item.tool).return_direct
    ]


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def final_output(agent: Agent, content: str) -> str:
    """The run's output: the answer as is, or with `output_type`, validated JSON."""
    if agent.output_type is None:
        return content
    match = _FENCE.match(content)  # models often wrap JSON in a code fence
    parsed = agent.output_type.model_validate_json(match.group(1) if match else content)
    return parsed.model_dump_json()


def budget_reached(run: RunRecord, agent: Agent, history: list[HistoryItem]) -> str | None:
    """Checked before each model call: iterations, repair turns, tokens, cost."""
    if run.turn >= agent.max_iterations:
        return f"stopped after {agent.max_iterations} model turns (the agent's max_iterations)"
    repair_turns = {
        i.turn
        for i in history
        if isinstance(i, ToolResult) and i.error_type is not None and i.error_type.is_invalid_call
    }
    repair_turns |= {i.turn for i in history if isinstance(i, UserMessage) and i.repair}
    if len(repair_turns) > agent.max_repair_turns:
        return (
            f"the model needed repairing (invalid tool calls or answers) in {len(repair_turns)} turns "
            f"(the agent's max_repair_turns is {agent.max_repair_turns})"
        )
    if agent.max_tokens is not None and run.usage.total_tokens >= agent.max_tokens:
        return f"used {run.usage.total_tokens} tokens (the agent's max_tokens is {agent.max_tokens})"
    cost = run.usage.cost_micro_usd / 1_000_000
    if agent.max_cost_usd is not None and cost >= agent.max_cost_usd:
        return f"cost ${cost:.4f} (the agent's max_cost_usd is ${agent.max_cost_usd:.4f})"
    return None


def tree_budget_reached(
    root_agent: Agent, tree: Usage, is_child: bool, calls_only: bool = False
) -> str | None:
    """The root agent's budgets, counted over the root run and every child run it started.
    `calls_only` on a reply with calls: tokens and cost are checked before the next model call."""
    whose = "this run and the runs its agent tools started" if not is_child else "the runs of this run's tree"
    if tree.tool_calls > root_agent.max_tool_calls:
        return f"{whose} asked for {tree.tool_calls} tool calls (the root agent's max_tool_calls is {root_agent.max_tool_calls})"
    if calls_only:
        return None
    if root_agent.max_tokens is not None and tree.total_tokens >= root_agent.max_tokens:
        return f"{whose} used {tree.total_tokens} tokens (the root agent's max_tokens is {root_agent.max_tokens})"
    cost = tree.cost_micro_usd / 1_000_000
    if root_agent.max_cost_usd is not None and cost >= root_agent.max_cost_usd:
        return f"{whose} cost ${cost:.4f} (the root agent's max_cost_usd is ${root_agent.max_cost_usd:.4f})"
    return None


def calls_limit(agent: Agent, history: list[HistoryItem]) -> str | None:
    """Checked on each reply with calls: run-wide call count, and the same call repeated."""
    calls = [c for i in history if isinstance(i, AssistantMessage) for c in i.tool_calls]
    if len(calls) > agent.max_tool_calls:
        return f"the model asked for {len(calls)} tool calls (the agent's max_tool_calls is {agent.max_tool_calls})"
    seen: dict[tuple[str, str], int] = {}
    for call in calls:
        key = (call.name, _canonical(call.arguments))
        seen[key] = seen.get(key, 0) + 1
        if seen[key] >= agent.max_identical_calls:
            return (
                f"the model called {_named(call.name)} with the same arguments {seen[key]} times "
                f"(the agent's max_identical_calls is {agent.max_identical_calls})"
            )
    return None


def _named(tool: str) -> str:
    # A sloppy model server may send a call with a null or empty name: said, not left blank.
    return f"'{tool}'" if tool else "a tool with no name"


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except (ValueError, RecursionError):  # not JSON, or JSON Python will not read: compared as text
        return arguments


def ended_status(status: RunStatus) -> DecisionStatus:
    return {
        RunStatus.SUCCEEDED: DecisionStatus.FINAL,
        RunStatus.FAILED: DecisionStatus.FAILED,
        RunStatus.CANCELLED: DecisionStatus.FAILED,
    }.get(status, DecisionStatus.LIMIT)
