"""Which agent answers a run, read from its history.

A call's result records what it asked of the run (`ToolResult.handoff`): a transfer (the
model's `transfer_to_<agent>`, or a tool's `context.actions.transfer_to_agent`) or an escalate
(a tool's `context.actions.escalate`). The agents answering form a stack: a transfer pushes its
target, an escalate pops back to the agent that handed off (with none left, the run ends with
the escalating call's result). In each turn one request counts: the model's transfer if it made
one (the orchestrator allows one a reply), else the first tool's, in call order.

Read from the history, never kept apart from it: the history is written exactly once per slot,
so a step retried after a crash, or a redelivered call, finds the same switch; the run record's
`active_agent` and `handoffs` are a copy for readers, brought up to date by the next step.
"""

from dataclasses import dataclass, field

from toolpipe.shared.agents import AGENTS, Agent, Handoff
from toolpipe.shared.agents.app import reachable
from toolpipe.shared.errors import describe_exception
from toolpipe.shared.messages import (
    AssistantMessage,
    HandoffRecord,
    HistoryItem,
    RunRecord,
    ToolResult,
    UserMessage,
)


@dataclass(frozen=True)
class Chain:
    """The agents of a run as its history leaves them."""

    # The agents that answer in turn, the last now; each with the transfer that made it answer
    # (None for the run's own agent).
    stack: list[tuple[str, HandoffRecord | None]]
    handoffs: list[HandoffRecord] = field(default_factory=list)
    # The result whose escalate left no agent to return to: the run ends with it.
    ended_by: ToolResult | None = None

    @property
    def active(self) -> str:
        return self.stack[-1][0]

    @property
    def entered_by(self) -> HandoffRecord | None:
        """The transfer that made the active agent answer: its handoff's history filter says
        what the agent reads of the turns before it."""
        return self.stack[-1][1]


def follow(start: str, history: list[HistoryItem]) -> Chain:
    """The chain of agents from the run's own (`start`), through every turn's first request."""
    first: dict[int, ToolResult] = {}
    asked = (i for i in history if isinstance(i, ToolResult) and i.handoff)
    for item in sorted(asked, key=lambda i: (i.handoff is None or i.handoff.by != "model", i.seq)):
        first.setdefault(item.turn, item)
    stack: list[tuple[str, HandoffRecord | None]] = [(start, None)]
    handoffs: list[HandoffRecord] = []
    for turn in sorted(first):
        result = first[turn]
        action = result.handoff
        assert action is not None
        current = stack[-1][0]
        if action.kind == "transfer" and action.agent:
            via = result.tool if action.by == "model" else None
            record = HandoffRecord(
                turn=turn, kind="transfer", from_agent=current, to_agent=action.agent, via=via
            )
            handoffs.append(record)
            stack.append((action.agent, record))
        elif action.kind == "escalate":
            if len(stack) == 1:
                return Chain(stack, handoffs, ended_by=result)
            stack.pop()
            handoffs.append(
                HandoffRecord(turn=turn, kind="escalate", from_agent=current, to_agent=stack[-1][0])
            )
    return Chain(stack, handoffs)


def allowed_tools(run: RunRecord, agent: str) -> list[str] | None:
    """The tools `agent` may use in this run (None: all of its own): the run's set for the agent
    that started it, else the set recorded when a handoff last moved the run to it."""
    if agent == run.agent:
        return run.tools
    moved = next((h for h in reversed(run.handoffs) if h.to_agent == agent), None)
    return None if moved is None else moved.tools


def transfer_refusal(run: RunRecord, current: str, target: Agent) -> str | None:
    """Why the run may not move from `current` to `target`, or None."""
    if target.name == current:
        return f"the run is with '{current}' already"
    if run.parent is not None and any(a.waits for a in reachable(target, AGENTS)):
        # An agent tool's run answers its parent's call, which waits on a heartbeat: it cannot
        # wait days for a person (the rule agent tools follow, shared/agents/app.py).
        return (
            f"'{target.name}' has calls that may wait for a person or a program, and this run answers "
            "another agent's call, which cannot wait for them"
        )
    return None


def filtered_history(handoff: Handoff, items: list[HistoryItem]) -> list[HistoryItem] | str:
    """The handoff's `input_filter` applied to `items`, checked: a list of history items with
    each call's result and each result's call (the model API refuses a lone one). Else what
    went wrong, in words that follow "its input_filter"."""
    assert handoff.input_filter is not None
    try:
        kept = handoff.input_filter(list(items))
    except Exception as e:  # user code: its failure is said, never a step that dies
        return f"raised {describe_exception(e)}"
    if not isinstance(kept, list) or not all(
        isinstance(i, UserMessage | AssistantMessage | ToolResult) for i in kept
    ):
        return "did not return a list of history items"
    calls = {c.id for i in kept if isinstance(i, AssistantMessage) for c in i.tool_calls}
    results = {i.call_id for i in kept if isinstance(i, ToolResult)}
    if calls != results:
        return "left a tool call without its result, or a result without its call"
    return kept
