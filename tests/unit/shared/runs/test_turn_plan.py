"""The turn planner on its own: a reply's calls sorted into refusals, transfers, hook answers and
calls to dispatch or wait, from the agents of a plain in-memory catalog: no app loaded, no model
server, no store (the planner has none to write to). Then the model step applying a plan, on
the in-memory store with the model scripted in-process."""

import dataclasses
import json
import time
from typing import Any

import pytest
from pydantic import BaseModel

from tests.unit.shared.runs.test_runs import Reporter, Starter
from toolpipe.shared.agents import AGENTS, Agent, BeforeTool, Handoff, HandoffContext, Hooks
from toolpipe.shared.agents.errors import UnknownAgentError
from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.history import MemoryHistoryStore
from toolpipe.shared.messages import (
    AssistantMessage,
    HandoffAction,
    HistoryItem,
    RunRecord,
    RunStatus,
    StepRequest,
    ToolCall,
    ToolResult,
    UserMessage,
)
from toolpipe.shared.model import ModelReply
from toolpipe.shared.runs import ModelStep
from toolpipe.shared.runs.turn_plan import HookAnswer, Refusal, TransferAnswer, TurnPlan, TurnPlanner
from toolpipe.shared.settings import CallTimeouts
from toolpipe.shared.tools import tool

TIMEOUTS = CallTimeouts(timeout_seconds=30, heartbeat_seconds=10, approval_timeout_seconds=600)


@tool
def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: The city.
    """
    return city


@tool(requires_approval=True)
def pay(amount: int) -> str:
    """Pay an amount.

    Args:
        amount: In cents.
    """
    return f"paid {amount}"


@tool(requires_approval=lambda arguments, ctx: arguments["amount"] > 100)
def refund(amount: int) -> str:
    """Refund an amount.

    Args:
        amount: In cents.
    """
    return f"refunded {amount}"


@tool(deferred="human", wait_seconds=3600)
def ask_person(question: str) -> str:
    """Ask a person.

    Args:
        question: The question.
    """
    return ""


class Reason(BaseModel):
    reason: str


class Agents:
    """The catalog a test gives: its agents by name, as defined (no run extends them)."""

    def __init__(self, *agents: Agent) -> None:
        self._agents = {a.name: a for a in agents}

    def get(self, name: str) -> Agent:
        try:
            return self._agents[name]
        except KeyError:
            raise UnknownAgentError(name, list(self._agents)) from None

    def in_run(self, run: RunRecord, name: str | None) -> Agent:
        return self.get(name or run.agent)


class Answering(Hooks):
    """Answers, blocks or changes calls to the tool it is given, before they wait."""

    def __init__(
        self, tool: str, *, answer: str | None = None, block: str | None = None, change: bool = False
    ):
        super().__init__()
        self.tool, self.answer, self.block, self.change = tool, answer, block, change
        self.seen: list[str] = []

    def before_tool(self, event: BeforeTool) -> None:
        if event.call.name != self.tool:
            return
        self.seen.append(event.call.arguments)
        event.result = self.answer
        event.blocked = self.block
        if self.change:
            event.call = event.call.model_copy(update={"arguments": '{"question": "another"}'})


handed: list[tuple[str, str, Any]] = []


def _billing() -> Agent:
    return Agent(name="t-billing", instructions="Billing.", tools=[lookup])


def _desk(**fields: Any) -> Agent:
    return Agent(
        name="t-desk",
        instructions="You help.",
        tools=[lookup, pay, refund, ask_person],
        handoffs=[
            Handoff(
                "t-billing",
                input_type=Reason,
                on_handoff=lambda c, g: handed.append((c.from_agent, c.to_agent, g)),
            ),
            "t-support",
            "t-ghost",
        ],
        **fields,
    )


def _support() -> Agent:
    return Agent(name="t-support", instructions="Support.", tools=[lookup])


def _run(**fields: Any) -> RunRecord:
    return RunRecord(run_id="r1", agent="t-desk", status=RunStatus.RUNNING, caller="alice", **fields)


def _reply(*calls: tuple[str, dict[str, Any] | str]) -> AssistantMessage:
    return AssistantMessage(
        seq=2,
        turn=1,
        agent="t-desk",
        tool_calls=[
            ToolCall(id=f"c{i}", name=name, arguments=args if isinstance(args, str) else json.dumps(args))
            for i, (name, args) in enumerate(calls)
        ],
    )


def _plan(
    reply: AssistantMessage,
    agent: Agent | None = None,
    run: RunRecord | None = None,
    answered: list[ToolResult] | None = None,
) -> TurnPlan:
    agent = agent or _desk()
    catalog = Agents(agent, _billing(), _support())
    history: list[HistoryItem] = [UserMessage(seq=1, turn=0, content="hello"), reply, *(answered or [])]
    return TurnPlanner(catalog, TIMEOUTS).plan(run or _run(), agent, history, reply)


@pytest.fixture(autouse=True)
def _clean() -> None:
    handed.clear()
    # The planner reaches agents through its catalog only: none of these is registered.
    assert not {"t-desk", "t-billing", "t-support"} & set(AGENTS)


def test_an_unknown_tool_is_refused_and_not_dispatched() -> None:
    plan = _plan(_reply(("nope", {}), ("lookup", {"city": "Oslo"})))

    assert plan.refusals == (
        Refusal(
            3, ToolCall(id="c0", name="nope", arguments="{}"), plan.refusals[0].text, ErrorKind.UNKNOWN_TOOL
        ),
    )
    assert plan.refusals[0].text.startswith("Error: ") and "nope" in plan.refusals[0].text
    assert [(c.seq, c.tool) for c in plan.calls] == [(4, "lookup")]
    result = plan.refusals[0].result(plan.turn)
    assert (result.seq, result.call_id, result.status, result.error_type) == (
        3,
        "c0",
        "error",
        ErrorKind.UNKNOWN_TOOL,
    )


def test_a_tool_outside_the_runs_set_is_refused() -> None:
    plan = _plan(_reply(("pay", {"amount": 5}), ("lookup", {"city": "Oslo"})), run=_run(tools=["lookup"]))

    assert [(r.seq, r.kind) for r in plan.refusals] == [(3, ErrorKind.TOOL_NOT_ALLOWED)]
    assert [c.tool for c in plan.calls] == ["lookup"]


def test_invalid_arguments_are_refused_with_the_validation_error() -> None:
    plan = _plan(_reply(("lookup", {"town": "Oslo"})))

    assert [(r.seq, r.kind) for r in plan.refusals] == [(3, ErrorKind.INVALID_ARGUMENTS)]
    assert "city" in plan.refusals[0].text
    assert plan.calls == ()


def test_calls_over_the_per_turn_limit_are_refused_even_a_transfer() -> None:
    agent = _desk(max_calls_per_turn=2)
    reply = _reply(
        ("lookup", {"city": "A"}),
        ("lookup", {"city": "B"}),
        ("lookup", {"city": "C"}),
        ("transfer_to_t-support", {}),
    )

    plan = _plan(reply, agent)

    assert [c.seq for c in plan.calls] == [3, 4]
    assert [(r.seq, r.kind) for r in plan.refusals] == [
        (5, ErrorKind.TOO_MANY_CALLS),
        (6, ErrorKind.TOO_MANY_CALLS),
    ]
    assert plan.transfers == ()


def test_a_transfer_is_answered_in_the_step_with_its_hook_run_once() -> None:
    plan = _plan(_reply(("transfer_to_t-billing", {"reason": "an invoice"}), ("lookup", {"city": "Oslo"})))

    (transfer,) = plan.transfers
    assert transfer.seq == 3 and transfer.kind is None
    assert transfer.action == HandoffAction(kind="transfer", agent="t-billing", by="model")
    assert transfer.text == "Transferred to t-billing: the t-billing agent answers from now on."
    assert handed == [("t-desk", "t-billing", Reason(reason="an invoice"))]
    result = transfer.result(plan.turn)
    assert (result.status, result.handoff) == ("ok", transfer.action)
    assert [c.tool for c in plan.calls] == ["lookup"]


def test_only_the_first_transfer_of_a_reply_counts() -> None:
    plan = _plan(_reply(("transfer_to_t-support", {}), ("transfer_to_t-billing", {"reason": "x"})))

    first, second = plan.transfers
    assert first.action is not None and first.action.agent == "t-support"
    assert (second.action, second.kind) == (None, ErrorKind.HANDOFF_REFUSED)
    assert "already transferred the run to 't-support'" in second.text
    assert handed == []  # the refused transfer's on_handoff never ran


def test_a_transfer_recorded_by_an_earlier_try_still_counts() -> None:
    reply = _reply(("transfer_to_t-support", {}), ("transfer_to_t-billing", {"reason": "x"}))
    stored = ToolResult(
        seq=3,
        turn=1,
        call_id="c0",
        tool="transfer_to_t-support",
        content="Transferred",
        status="ok",
        handoff=HandoffAction(kind="transfer", agent="t-support", by="model"),
    )

    plan = _plan(reply, answered=[stored])

    (second,) = plan.transfers
    assert (second.seq, second.kind) == (4, ErrorKind.HANDOFF_REFUSED)


def test_refused_transfers_say_why() -> None:
    plan = _plan(_reply(("transfer_to_t-ghost", {})))
    assert [(t.kind, t.action) for t in plan.transfers] == [(ErrorKind.UNKNOWN_AGENT, None)]
    assert "no agent named 't-ghost'" in plan.transfers[0].text

    plan = _plan(_reply(("transfer_to_t-billing", {"why": "no reason"})))
    assert [(t.kind, t.action) for t in plan.transfers] == [(ErrorKind.INVALID_ARGUMENTS, None)]
    assert handed == []


def test_a_failing_on_handoff_refuses_the_transfer() -> None:
    def broken(context: HandoffContext, given: BaseModel | None) -> None:
        raise RuntimeError("no desk")

    agent = dataclasses.replace(_desk(), handoffs=[Handoff("t-support", on_handoff=broken)])

    (transfer,) = _plan(_reply(("transfer_to_t-support", {})), agent).transfers

    assert (transfer.kind, transfer.action) == (ErrorKind.TOOL_FAILED, None)
    assert transfer.text == "Error: not transferred to 't-support': on_handoff failed: RuntimeError: no desk"


def test_approval_and_deferred_calls_wait_and_the_rest_do_not() -> None:
    reply = _reply(
        ("pay", {"amount": 5}),
        ("refund", {"amount": 50}),
        ("refund", {"amount": 500}),
        ("ask_person", {"question": "ok?"}),
        ("lookup", {"city": "Oslo"}),
    )

    plan = _plan(reply)

    assert [(c.seq, c.tool, c.needs_approval, c.deferred) for c in plan.calls] == [
        (3, "pay", True, None),
        (4, "refund", None, None),  # its policy says no for 50
        (5, "refund", True, None),
        (6, "ask_person", None, "human"),
        (7, "lookup", None, None),
    ]
    assert [c.seq for c in plan.deferred] == [3, 5, 6]
    assert plan.calls[3].approval_timeout_seconds == 3600  # the tool's own wait
    assert all((c.timeout_seconds, c.heartbeat_seconds, c.message_seq) == (30, 10, 2) for c in plan.calls)
    assert plan.answers == ()


def test_a_hook_that_answers_a_deferred_call_is_its_result() -> None:
    hooks = Answering("ask_person", answer="yes, go ahead")
    plan = _plan(
        _reply(("ask_person", {"question": "ok?"}), ("lookup", {"city": "Oslo"})), _desk(hooks=[hooks])
    )

    (answer,) = plan.hook_answers
    assert (answer.seq, answer.outcome.content, answer.outcome.status) == (3, "yes, go ahead", "ok")
    assert [c.tool for c in plan.calls] == ["lookup"] and plan.deferred == ()
    assert hooks.seen == ['{"question": "ok?"}']


def test_a_hook_that_blocks_or_changes_a_deferred_call_refuses_it() -> None:
    blocked = _plan(
        _reply(("ask_person", {"question": "ok?"})), _desk(hooks=[Answering("ask_person", block="not now")])
    )
    changed = _plan(
        _reply(("ask_person", {"question": "ok?"})), _desk(hooks=[Answering("ask_person", change=True)])
    )

    assert [(a.outcome.content, a.outcome.error_type) for a in blocked.hook_answers] == [
        ("Error: Blocked: not now", ErrorKind.BLOCKED)
    ]
    assert [a.outcome.error_type for a in changed.hook_answers] == [ErrorKind.BLOCKED]
    assert "changed this call" in changed.hook_answers[0].outcome.content
    assert blocked.calls == changed.calls == ()


def test_hooks_do_not_see_calls_a_worker_runs() -> None:
    hooks = Answering("lookup", answer="from the hook")
    plan = _plan(_reply(("lookup", {"city": "Oslo"})), _desk(hooks=[hooks]))

    assert plan.hook_answers == () and [c.tool for c in plan.calls] == ["lookup"]
    assert hooks.seen == []  # the worker runs them around the call, not the planner


def test_a_mixed_reply_keeps_call_order_and_skips_answered_calls() -> None:
    hooks = Answering("ask_person", answer="42")
    reply = _reply(
        ("lookup", {"city": "Oslo"}),
        ("nope", {}),
        ("transfer_to_t-support", {}),
        ("ask_person", {"question": "how many?"}),
        ("pay", {"amount": 1}),
        ("lookup", "not json"),
    )
    earlier = ToolResult(seq=3, turn=1, call_id="c0", tool="lookup", content="Oslo", status="ok")

    plan = _plan(reply, _desk(hooks=[hooks]), answered=[earlier])

    assert [(type(a), a.seq) for a in plan.answers] == [
        (Refusal, 4),
        (TransferAnswer, 5),
        (HookAnswer, 6),
        (Refusal, 8),
    ]
    assert [(c.seq, c.tool) for c in plan.calls] == [(7, "pay")]
    assert [c.seq for c in plan.deferred] == [7]
    assert [r.result(plan.turn).call_id for r in plan.answers] == ["c1", "c2", "c3", "c5"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.calls = ()  # type: ignore[misc]


class OneReply:
    """The model, scripted in-process: one reply with these calls (no HTTP server)."""

    def __init__(self, *calls: tuple[str, dict[str, Any]]) -> None:
        self.calls = [ToolCall(id=f"m{i}", name=n, arguments=json.dumps(a)) for i, (n, a) in enumerate(calls)]
        self.asked: list[list[str]] = []

    def complete(
        self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], deadline: float
    ) -> ModelReply:
        self.asked.append([t["function"]["name"] for t in tools])
        return ModelReply(content=None, tool_calls=self.calls, prompt_tokens=5, completion_tokens=3)


def test_the_step_applies_its_plan_with_no_app_and_no_model_server() -> None:
    store = MemoryHistoryStore()
    store.create_run(_run(), UserMessage(seq=1, turn=0, content="hello"))
    model = OneReply(
        ("nope", {}), ("transfer_to_t-support", {}), ("pay", {"amount": 5}), ("lookup", {"city": "Oslo"})
    )
    step = ModelStep(
        store,
        model,
        "m",
        TIMEOUTS,
        Reporter(),
        lambda arn: Starter(),
        agents=Agents(_desk(), _billing(), _support()),
    )

    decision = step.step(StepRequest(run_id="r1"), deadline=time.monotonic() + 30)

    assert model.asked == [
        [
            "lookup",
            "pay",
            "refund",
            "ask_person",
            "transfer_to_t-billing",
            "transfer_to_t-support",
            "transfer_to_t-ghost",
        ]
    ]
    # The calls the step answered itself are in the history, in their slots; the rest are the decision.
    results = {i.seq: i for i in store.load_history("r1") if isinstance(i, ToolResult)}
    assert [(s, r.status, r.error_type) for s, r in sorted(results.items())] == [
        (3, "error", ErrorKind.UNKNOWN_TOOL),
        (4, "ok", None),
    ]
    assert results[4].handoff == HandoffAction(kind="transfer", agent="t-support", by="model")
    assert decision.gated and [(c.seq, c.tool, c.needs_approval) for c in decision.calls] == [
        (5, "pay", True),
        (6, "lookup", False),
    ]
