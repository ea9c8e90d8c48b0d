"""Handoff: a run goes on under another agent (issue 20). The model step and the worker on the
in-memory store; the model is the scripted OpenAI-compatible server, through the real client."""

import dataclasses
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from tests.unit.shared.runs.test_runs import Reporter, Starter
from toolpipe.infra.local.scripted_model import Reply, ScriptedModelServer, ScriptResponder
from toolpipe.shared.agents import AGENTS, Agent, Handoff, HandoffContext, agent_tool, remove_tool_calls
from toolpipe.shared.errors import DefinitionError, ErrorKind
from toolpipe.shared.history import MemoryHistoryStore
from toolpipe.shared.messages import (
    AssistantMessage,
    Decision,
    DecisionStatus,
    HandoffAction,
    ParentCall,
    RunRecord,
    RunStatus,
    StartRunRequest,
    StepRequest,
    ToolCallMessage,
    ToolResult,
    UserMessage,
)
from toolpipe.shared.model.openai_client import OpenAIModelClient, build_openai_client
from toolpipe.shared.runs import ModelStep, ToolCallExecutor
from toolpipe.shared.runs.catalog import RegisteredAgents
from toolpipe.shared.runs.tool_run import ToolRunRequest, ToolRunResponse
from toolpipe.shared.settings import CallTimeouts
from toolpipe.shared.tools import ToolContext, tool

EFFECTS: list[str] = []
handed_over: list[tuple[str, str, Any]] = []


@tool
def note(text: str) -> str:
    """Write a note.

    Args:
        text: The note.
    """
    EFFECTS.append(text)
    return f"noted {text}"


@tool
def give_back(ctx: ToolContext) -> str:
    """Give the conversation back to the agent that handed it over."""
    ctx.actions.escalate = True
    return "over to you"


@tool
def send_to(agent: str, ctx: ToolContext) -> str:
    """Send the conversation to another agent.

    Args:
        agent: The agent's name.
    """
    ctx.actions.transfer_to_agent = agent
    return f"sending to {agent}"


@tool
def escalate_then_fail(ctx: ToolContext) -> str:
    """Ask to escalate, then fail."""
    ctx.actions.escalate = True
    raise RuntimeError("broken")


class Reason(BaseModel):
    reason: str


def _on_handoff(context: HandoffContext, given: BaseModel | None) -> None:
    handed_over.append((context.from_agent, context.to_agent, given))


@pytest.fixture(autouse=True)
def agents(monkeypatch: pytest.MonkeyPatch) -> None:
    EFFECTS.clear()
    handed_over.clear()
    billing = Agent(
        name="billing",
        instructions="You answer billing questions.",
        tools=[note, give_back, send_to, escalate_then_fail],
        description="Invoices, refunds and payments.",
    )
    triage = Agent(
        name="triage",
        instructions="You route questions.",
        tools=[note, give_back, send_to],
        handoffs=[
            Handoff(billing, input_type=Reason, on_handoff=_on_handoff),
            "support",
            Handoff("ghost", description="Nobody."),
        ],
    )
    support = Agent(name="support", instructions="You fix things.", tools=[note], handoffs=["triage"])
    for agent in (billing, triage, support):
        monkeypatch.setitem(AGENTS, agent.name, agent)


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(ScriptResponder([])) as server:
        yield server


class Driver:
    """Steps a run as the state machine would: model step, then each dispatched call."""

    def __init__(self, model: ScriptedModelServer, agent: str = "triage", **fields: Any) -> None:
        self.store = MemoryHistoryStore()
        self.model = model
        client = OpenAIModelClient(build_openai_client(model.base_url, "k"), max_retries=0)
        self.step = ModelStep(
            self.store,
            client,
            "m",
            CallTimeouts(),
            Reporter(),
            lambda arn: Starter(),
            agents=RegisteredAgents(),
        )
        self.worker = ToolCallExecutor(
            self.store, Reporter(), Starter(), heartbeat_every=60, sleep=lambda s: None
        )
        assert self.store.create_run(
            RunRecord(run_id="r1", agent=agent, status=RunStatus.RUNNING, **fields),
            UserMessage(seq=1, turn=0, content="hi"),
        )

    def script(self, *replies: Reply) -> None:
        self.model.responder = ScriptResponder(list(replies))

    def decide(self) -> Decision:
        return self.step.step(StepRequest(run_id="r1", results=[]), time.monotonic() + 60)

    def run_calls(self, decision: Decision) -> None:
        for ref in decision.calls:
            message = ToolCallMessage(run_id="r1", seq=ref.seq, message_seq=ref.message_seq, task_token="t")
            self.worker.execute(message, lease_seconds=60)

    def until_end(self, turns: int = 10) -> Decision:
        for _ in range(turns):
            decision = self.decide()
            if decision.status is not DecisionStatus.TOOL_CALLS:
                return decision
            self.run_calls(decision)
        raise AssertionError("the run did not end")

    def run(self) -> RunRecord:
        return self.store.get_run("r1")

    def results(self) -> list[ToolResult]:
        return [i for i in self.store.load_history("r1") if isinstance(i, ToolResult)]


def call(name: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    return (name, arguments)


def _names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


def test_a_transfer_hands_the_run_to_the_target_from_the_next_turn(model: ScriptedModelServer) -> None:
    driver = Driver(model)
    driver.script(
        Reply(tool_calls=[call("transfer_to_billing", reason="an invoice")]), Reply(content="Refunded.")
    )

    decision = driver.until_end()

    assert decision.status is DecisionStatus.FINAL
    first, second = model.requests
    assert _names(first) == [
        "note",
        "give_back",
        "send_to",
        "transfer_to_billing",
        "transfer_to_support",
        "transfer_to_ghost",
    ]
    described = next(t for t in first["tools"] if t["function"]["name"] == "transfer_to_billing")["function"]
    assert "Invoices, refunds and payments." in described["description"]
    assert described["parameters"]["required"] == ["reason"]
    # The second request is billing's: its instructions and tools, and the whole history.
    assert second["messages"][0]["content"].startswith("You answer billing questions.")
    assert _names(second) == ["note", "give_back", "send_to", "escalate_then_fail"]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    run = driver.run()
    assert (run.status, run.output, run.agent, run.active_agent) == (
        RunStatus.SUCCEEDED,
        "Refunded.",
        "triage",
        "billing",
    )
    assert [(h.turn, h.kind, h.from_agent, h.to_agent) for h in run.handoffs] == [
        (1, "transfer", "triage", "billing")
    ]
    replies = [i for i in driver.store.load_history("r1") if isinstance(i, AssistantMessage)]
    assert [r.agent for r in replies] == ["triage", "billing"]
    assert handed_over == [("triage", "billing", Reason(reason="an invoice"))]


def test_two_transfers_in_one_reply_the_first_wins(model: ScriptedModelServer) -> None:
    driver = Driver(model)
    driver.script(
        Reply(tool_calls=[call("transfer_to_support"), call("transfer_to_billing", reason="x")]),
        Reply(content="Support here."),
    )

    driver.until_end()

    first, second = driver.results()
    assert first.status == "ok" and first.handoff is not None and first.handoff.agent == "support"
    assert second.status == "error" and second.error_type is ErrorKind.HANDOFF_REFUSED
    assert second.content == (
        "Error: not transferred: this reply already transferred the run to 'support'; only the first transfer counts."
    )
    assert model.requests[1]["messages"][0]["content"].startswith("You fix things.")
    assert [h.to_agent for h in driver.run().handoffs] == ["support"]
    assert handed_over == []  # billing's on_handoff never ran: its transfer was not made


def test_ordinary_calls_in_the_transfer_reply_run_then_the_run_switches(model: ScriptedModelServer) -> None:
    driver = Driver(model)
    driver.script(
        Reply(
            tool_calls=[call("note", text="before"), call("transfer_to_support"), call("note", text="also")]
        ),
        Reply(content="Support here."),
    )

    decision = driver.decide()

    # Triage's calls go out as any; the transfer is answered by the step, never dispatched.
    assert [c.tool for c in decision.calls] == ["note", "note"]
    driver.run_calls(decision)
    driver.until_end()
    assert EFFECTS == ["before", "also"]
    assert driver.run().active_agent == "support"
    assert model.requests[1]["messages"][0]["content"].startswith("You fix things.")


def test_a_transfer_to_an_agent_not_deployed_is_an_error_the_model_reads(model: ScriptedModelServer) -> None:
    driver = Driver(model)
    driver.script(Reply(tool_calls=[call("transfer_to_ghost")]), Reply(content="Still triage."))

    driver.until_end()

    [result] = driver.results()
    assert result.error_type is ErrorKind.UNKNOWN_AGENT
    assert result.content == "Error: not transferred: no agent named 'ghost' is deployed."
    assert driver.run().active_agent is None and driver.run().handoffs == []
    assert model.requests[1]["messages"][0]["content"].startswith("You route questions.")


def test_invalid_transfer_input_is_a_repairable_error(model: ScriptedModelServer) -> None:
    driver = Driver(model)
    driver.script(Reply(tool_calls=[call("transfer_to_billing")]), Reply(content="ok"))

    driver.until_end()

    [result] = driver.results()
    assert result.error_type is ErrorKind.INVALID_ARGUMENTS and "reason" in result.content
    assert driver.run().handoffs == [] and handed_over == []


def test_an_on_handoff_that_raises_leaves_the_run_where_it_is(
    model: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(context: HandoffContext, given: BaseModel | None) -> None:
        raise PermissionError("billing is closed")

    triage = AGENTS["triage"]
    monkeypatch.setitem(
        AGENTS,
        "triage",
        Agent(name="triage", instructions="x", handoffs=[Handoff("billing", on_handoff=refuse)]),
    )
    driver = Driver(model)
    driver.script(Reply(tool_calls=[call("transfer_to_billing")]), Reply(content="ok"))

    driver.until_end()

    [result] = driver.results()
    assert (
        result.content
        == "Error: not transferred to 'billing': on_handoff failed: PermissionError: billing is closed"
    )
    assert driver.run().handoffs == [] and triage is not AGENTS["triage"]


def test_escalate_returns_to_the_agent_that_handed_off_and_a_second_ends_the_run(
    model: ScriptedModelServer,
) -> None:
    driver = Driver(model)
    driver.script(
        Reply(tool_calls=[call("transfer_to_billing", reason="x")]),
        Reply(tool_calls=[call("give_back")]),  # billing escalates: back to triage
        Reply(tool_calls=[call("give_back")]),  # triage escalates: nobody above, the run ends
        Reply(content="never asked"),
    )

    decision = driver.until_end()

    assert decision.status is DecisionStatus.FINAL and len(model.requests) == 3
    assert model.requests[2]["messages"][0]["content"].startswith("You route questions.")
    run = driver.run()
    assert (run.status, run.output, run.active_agent) == (RunStatus.SUCCEEDED, "over to you", "triage")
    assert [(h.kind, h.from_agent, h.to_agent) for h in run.handoffs] == [
        ("transfer", "triage", "billing"),
        ("escalate", "billing", "triage"),
    ]


def test_a_tool_can_transfer_and_a_failed_call_asks_nothing(model: ScriptedModelServer) -> None:
    driver = Driver(model)
    driver.script(
        Reply(tool_calls=[call("send_to", agent="billing")]),
        Reply(tool_calls=[call("escalate_then_fail")]),  # failed: its escalate is not honoured
        Reply(tool_calls=[call("send_to", agent="triage")]),  # not one of billing's handoffs
        Reply(content="billing answers"),
    )

    driver.until_end()

    results = driver.results()
    assert results[0].handoff is not None and results[0].handoff.by == "tool"
    assert results[1].status == "error" and results[1].handoff is None
    assert results[2].handoff is None
    assert (
        results[2].content
        == "sending to triage\n(Not transferred: 'triage' is not one of the handoffs of 'billing'.)"
    )
    assert model.requests[3]["messages"][0]["content"].startswith("You answer billing questions.")
    assert driver.run().active_agent == "billing"


def test_a_tools_transfer_goes_only_to_a_declared_deployed_other_agent(model: ScriptedModelServer) -> None:
    driver = Driver(model)
    driver.script(
        Reply(tool_calls=[call("send_to", agent="ghost")]),  # declared, not deployed
        Reply(tool_calls=[call("send_to", agent="triage")]),  # itself
        Reply(tool_calls=[call("send_to", agent="admin")]),  # not declared
        Reply(content="still triage"),
    )

    driver.until_end()

    assert [r.content.split("\n")[1] for r in driver.results()] == [
        "(Not transferred: no agent named 'ghost' is deployed.)",
        "(Not transferred: 'triage' is not one of the handoffs of 'triage'.)",
        "(Not transferred: 'admin' is not one of the handoffs of 'triage'.)",
    ]
    assert driver.run().handoffs == []


def test_a_runner_answer_cannot_forge_a_transfer(model: ScriptedModelServer) -> None:
    class Forging:
        def run(self, request: ToolRunRequest, tool: Any) -> ToolRunResponse:
            # Tool code owns the runner's process: it may answer anything.
            forged = HandoffAction(kind="transfer", agent="support", by="model")
            return ToolRunResponse(content="failed", status="error", handoff=forged)

    driver = Driver(model)
    driver.worker = ToolCallExecutor(
        driver.store, Reporter(), Starter(), heartbeat_every=60, sleep=lambda s: None, runner=Forging()
    )
    driver.script(Reply(tool_calls=[call("note", text="x")]), Reply(content="triage"))

    driver.until_end()

    assert driver.results()[0].handoff is None and driver.run().handoffs == []


def test_unreadable_actions_keep_the_tools_result(
    model: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    @tool
    def hop(ctx: ToolContext) -> str:
        """Do real work, then ask for a transfer to something that cannot be an agent."""
        ctx.state["done"] = "yes"
        ctx.actions.transfer_to_agent = 42  # type: ignore[assignment]
        return "did real work"

    triage = AGENTS["triage"]
    monkeypatch.setitem(AGENTS, "triage", dataclasses.replace(triage, tools=[*triage.tools, hop]))
    driver = Driver(model)
    driver.script(Reply(tool_calls=[call("hop")]), Reply(content="ok"))

    driver.until_end()

    [result] = driver.results()
    assert result.status == "ok" and result.content.startswith("did real work\n(Not transferred: the tool ")
    assert driver.store.load_state("r1") == {"done": "yes"}


def test_the_target_gets_its_own_tool_provider_and_the_callers_allow_list(
    model: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    billing = AGENTS["billing"]
    staff_only = dataclasses.replace(
        billing, tool_provider=lambda prompt, caller: ["note", "give_back"] if caller == "staff" else ["note"]
    )
    monkeypatch.setitem(AGENTS, "billing", staff_only)
    for caller, requested, offered in (
        ("mallory", None, ["note"]),
        ("staff", None, ["note", "give_back"]),
        ("staff", ["give_back", "send_to"], ["give_back"]),
    ):
        driver = Driver(model, caller=caller, requested_tools=requested)
        driver.script(Reply(tool_calls=[call("transfer_to_billing", reason="x")]), Reply(content="ok"))
        driver.until_end()
        assert _names(model.requests[-1]) == offered, caller
        assert driver.run().handoffs[0].tools == offered


def test_the_allow_list_may_name_the_tools_of_agents_the_run_can_reach() -> None:
    from toolpipe.shared.runs.errors import UnknownToolsRequestedError
    from toolpipe.shared.runs.starter import run_tools

    triage = AGENTS["triage"]
    request = StartRunRequest(input="hi", agent="triage", tools=["note", "escalate_then_fail"])
    assert run_tools(triage, request, "ana") == ["note"]  # billing's tool: allowed, not triage's
    with pytest.raises(UnknownToolsRequestedError):
        run_tools(triage, StartRunRequest(input="hi", agent="triage", tools=["no_such_tool"]), "ana")


def test_an_agent_tools_run_cannot_hand_off_to_an_agent_that_waits(
    model: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolpipe.shared.agents.app import waiting_child

    @tool(requires_approval=True)
    def wire(amount: int) -> str:
        """Wire money.

        Args:
            amount: Cents.
        """
        return "wired"

    waiting = Agent(name="approver", instructions="x", tools=[wire])
    helper = Agent(name="helper", instructions="x", handoffs=["approver"])
    parent = Agent(name="parent", instructions="x", tools=[agent_tool("helper")])
    for agent in (waiting, helper, parent):
        monkeypatch.setitem(AGENTS, agent.name, agent)
    assert "runs agent 'approver'" in (waiting_child([parent], AGENTS) or "")

    driver = Driver(
        model, agent="helper", parent=ParentCall(run_id="p", call_id="c", seq=3, turn=1, tool="helper")
    )
    driver.script(Reply(tool_calls=[call("transfer_to_approver")]))
    assert driver.decide().calls == []  # answered by the step: refused

    [result] = driver.results()
    assert result.error_type is ErrorKind.HANDOFF_REFUSED and "cannot wait for them" in result.content
    assert driver.run().handoffs == []


def test_an_escalate_out_gives_the_answer_the_agent_must_give(
    model: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Answer(BaseModel):
        text: str

    triage = AGENTS["triage"]
    monkeypatch.setitem(AGENTS, "triage", dataclasses.replace(triage, output_type=Answer))
    driver = Driver(model)
    driver.script(Reply(tool_calls=[call("give_back")]))

    driver.until_end()

    run = driver.run()
    assert run.status is RunStatus.FAILED
    assert (run.error or "").startswith(
        "the tool 'give_back' escalated out of the run, and its result is not"
    )


def test_the_models_transfer_wins_over_a_tools_request_in_its_turn(model: ScriptedModelServer) -> None:
    driver = Driver(model)
    driver.script(
        Reply(tool_calls=[call("give_back"), call("transfer_to_support")]),  # give_back comes first
        Reply(content="support"),
    )

    decision = driver.decide()
    driver.run_calls(decision)
    driver.until_end()

    assert driver.run().status is RunStatus.SUCCEEDED and driver.run().output == "support"
    assert driver.run().active_agent == "support"


def test_a_handoff_loop_ends_at_the_run_limit(
    model: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        AGENTS,
        "triage",
        Agent(name="triage", instructions="x", handoffs=["support"], max_iterations=5, max_identical_calls=9),
    )
    monkeypatch.setitem(
        AGENTS,
        "support",
        Agent(name="support", instructions="y", handoffs=["triage"], max_iterations=5, max_identical_calls=9),
    )
    driver = Driver(model)

    def ping_pong(request: dict[str, Any]) -> Reply:
        return Reply(tool_calls=[call(_names(request)[0])])

    model.responder = ping_pong

    decision = driver.until_end(turns=20)

    run = driver.run()
    assert decision.status is DecisionStatus.LIMIT and run.status is RunStatus.LIMIT
    assert len(model.requests) == 5 and len(run.handoffs) == 5  # turns count across agents
    assert "max_iterations" in (run.error or "")


def test_a_step_retried_after_the_transfer_neither_loses_nor_repeats_it(model: ScriptedModelServer) -> None:
    driver = Driver(model)
    driver.script(Reply(tool_calls=[call("transfer_to_billing", reason="x")]), Reply(content="billing"))
    first = driver.decide()
    assert first.calls == []
    # The step dies after writing its reply and the transfer's result, before returning:
    # Step Functions retries it, and then the next step runs again too.
    driver.script(Reply(content="billing"))
    again = driver.decide()
    assert again.status is DecisionStatus.FINAL
    retried = driver.decide()

    assert retried.status is DecisionStatus.FINAL
    run = driver.run()
    assert [h.to_agent for h in run.handoffs] == ["billing"] and run.output == "billing"
    assert len([r for r in driver.results() if r.handoff]) == 1
    assert handed_over == [("triage", "billing", Reason(reason="x"))]


def test_a_redelivered_call_of_the_agent_handed_from_runs_its_own_tool(model: ScriptedModelServer) -> None:
    driver = Driver(model)
    driver.script(
        Reply(tool_calls=[call("note", text="once"), call("transfer_to_support")]), Reply(content="done")
    )
    decision = driver.decide()
    driver.run_calls(decision)
    driver.until_end()
    # The note call comes again after the run moved to support: it answers from its result.
    driver.run_calls(decision)

    assert EFFECTS == ["once"]
    assert driver.results()[0].content == "noted once"


def test_the_history_filter_applies_to_the_turns_before_the_transfer(
    model: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        AGENTS,
        "triage",
        Agent(
            name="triage",
            instructions="x",
            tools=[note],
            handoffs=[Handoff("support", input_filter=remove_tool_calls)],
        ),
    )
    driver = Driver(model)
    driver.script(
        Reply(tool_calls=[call("note", text="a")]),
        Reply(content="Passing you on.", tool_calls=[call("transfer_to_support")]),
        Reply(content="support"),
    )

    driver.until_end()

    roles = [(m["role"], bool(m.get("tool_calls"))) for m in model.requests[2]["messages"]]
    # The note call and its result are gone; the transfer's turn is read whole.
    assert roles == [("system", False), ("user", False), ("assistant", True), ("tool", False)]


def test_the_filter_of_the_handoff_called_applies_and_a_failing_one_refuses(
    model: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(items: list[Any]) -> list[Any]:
        raise KeyError("boom")

    def orphan(items: list[Any]) -> list[Any]:
        return [i for i in items if not isinstance(i, AssistantMessage)]

    monkeypatch.setitem(
        AGENTS,
        "triage",
        Agent(
            name="triage",
            instructions="x",
            tools=[note],
            handoffs=[
                Handoff("support", tool_name="to_support_whole"),
                Handoff("support", tool_name="to_support_clean", input_filter=remove_tool_calls),
                Handoff("support", tool_name="to_support_broken", input_filter=broken),
                Handoff("support", tool_name="to_support_orphan", input_filter=orphan),
            ],
        ),
    )
    driver = Driver(model)
    driver.script(
        Reply(tool_calls=[call("note", text="secret")]),
        Reply(tool_calls=[call("to_support_broken")]),
        Reply(tool_calls=[call("to_support_orphan")]),
        Reply(tool_calls=[call("to_support_clean")]),
        Reply(content="support"),
    )

    driver.until_end()

    refused = [r.content for r in driver.results()[1:3]]
    assert refused == [
        "Error: not transferred to 'support': its input_filter raised KeyError: 'boom'",
        "Error: not transferred to 'support': its input_filter left a tool call without its result, or a "
        "result without its call",
    ]
    assert "noted secret" not in json.dumps(model.requests[-1]["messages"])
    assert driver.run().handoffs[0].via == "to_support_clean"


def test_definition_errors_are_said_at_import() -> None:
    with pytest.raises(DefinitionError, match="has the name of another tool"):
        Agent(name="a", instructions="x", tools=[note], handoffs=[Handoff("b", tool_name="note")])
    with pytest.raises(DefinitionError, match="handoffs are Agents"):
        Agent(name="a", instructions="x", handoffs=[42])  # type: ignore[list-item]
    long = Handoff("a" * 64)
    assert len(long.name) <= 64 and long.name.startswith("transfer_to_")
