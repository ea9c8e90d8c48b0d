"""The run services on the in-memory store: call identity, the ledger's exactly-once contract,
child-run bounds. The model is the scripted OpenAI-compatible server, through the real client."""

import time
from collections.abc import Iterator
from typing import Any

import pytest

from toolpipe.infra.local.scripted_model import Reply, ScriptedModelServer, ScriptResponder
from toolpipe.shared.agents import AGENTS, Agent, BeforeTool, Hooks, agent_tool
from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.history import MemoryHistoryStore
from toolpipe.shared.messages import (
    AssistantMessage,
    Decision,
    DecisionStatus,
    RunRecord,
    RunStatus,
    StepRequest,
    ToolCallMessage,
    ToolResult,
    Usage,
    UserMessage,
    text_safe,
)
from toolpipe.shared.model.openai_client import OpenAIModelClient, build_openai_client
from toolpipe.shared.runs import ModelStep, ToolCallExecutor
from toolpipe.shared.runs.catalog import RegisteredAgents
from toolpipe.shared.runs.errors import CallInProgressError
from toolpipe.shared.settings import CallTimeouts
from toolpipe.shared.tools import ToolContext, tool

EFFECTS: list[str] = []


@tool
def charge(amount: int, ctx: ToolContext) -> str:
    """Charge the customer.

    Args:
        amount: Cents.
    """
    EFFECTS.append(ctx.idempotency_key)
    return f"charged {amount}"


@tool(idempotent=True)
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    EFFECTS.append(key)
    return f"value of {key}"


class Reporter:
    """A recording TaskReporter; `closed` tokens no longer wait."""

    def __init__(self) -> None:
        self.answers: list[tuple[str, dict[str, Any]]] = []
        self.closed: set[str] = set()

    def succeed(self, token: str, output: dict[str, Any]) -> bool:
        self.answers.append((token, output))
        return token not in self.closed

    def heartbeat(self, token: str) -> bool:
        return token not in self.closed


class Starter:
    def __init__(self) -> None:
        self.started: list[tuple[str, int]] = []

    def start(
        self, run_id: str, execution: int = 1, deadline: str | None = None, waits: str = "count"
    ) -> None:
        self.started.append((run_id, execution))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def agents(monkeypatch: pytest.MonkeyPatch) -> None:
    EFFECTS.clear()
    monkeypatch.setitem(AGENTS, "payer", Agent(name="payer", instructions="Pay.", tools=[charge, lookup]))
    monkeypatch.setitem(
        AGENTS, "loop", Agent(name="loop", instructions="Delegate.", tools=[agent_tool("loop", name="again")])
    )


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(ScriptResponder([])) as server:
        yield server


def _step(
    store: MemoryHistoryStore, server: ScriptedModelServer, starter: Starter | None = None
) -> ModelStep:
    client = OpenAIModelClient(build_openai_client(server.base_url, "k"), max_retries=0)
    started = starter or Starter()
    return ModelStep(
        store, client, "m", CallTimeouts(), Reporter(), lambda arn: started, agents=RegisteredAgents()
    )


def _run(store: MemoryHistoryStore, run_id: str = "r1", agent: str = "payer", **fields: Any) -> None:
    record = RunRecord(run_id=run_id, agent=agent, status=RunStatus.RUNNING, **fields)
    assert store.create_run(record, UserMessage(seq=1, turn=0, content="go"))


def _raw_calls(*calls: tuple[str, str, str]) -> Any:
    """A responder answering once with calls given as (id, name, arguments) exactly as sent."""

    def respond(request: dict[str, Any]) -> Any:
        return Reply(
            tool_calls=[(name, {}) for _, name, _ in calls],
            raw_arguments={i: args for i, (_, _, args) in enumerate(calls)},
            raw_ids={i: call_id for i, (call_id, _, _) in enumerate(calls)},
        )

    return respond


def _deadline() -> float:
    return time.monotonic() + 60


# --- call identity ----------------------------------------------------------------------------


def test_calls_sharing_an_id_each_get_their_own_slot_and_id(model: ScriptedModelServer) -> None:
    store = MemoryHistoryStore()
    _run(store)
    model.responder = _raw_calls(*[("call_0", "charge", f'{{"amount": {n}}}') for n in (1, 2, 3)])

    decision = _step(store, model).step(StepRequest(run_id="r1"), _deadline())

    assert [c.seq for c in decision.calls] == [3, 4, 5]
    reply = store.get_item("r1", 2)
    assert isinstance(reply, AssistantMessage)
    ids = [c.id for c in reply.tool_calls]
    assert ids[0] == "call_0" and len(set(ids)) == 3
    assert [c.model_id for c in reply.tool_calls] == [None, "call_0", "call_0"]


def test_an_empty_or_reused_id_is_replaced(model: ScriptedModelServer) -> None:
    store = MemoryHistoryStore()
    _run(store)
    model.responder = _raw_calls(("call_0", "charge", '{"amount": 1}'))
    step = _step(store, model)
    step.step(StepRequest(run_id="r1"), _deadline())
    store.append("r1", ToolResult(seq=3, turn=1, call_id="call_0", tool="charge", content="ok", status="ok"))
    model.responder = _raw_calls(("call_0", "charge", '{"amount": 2}'), ("", "charge", '{"amount": 3}'))

    decision = step.step(StepRequest(run_id="r1", results=[]), _deadline())

    reply = store.get_item("r1", 4)
    assert isinstance(reply, AssistantMessage)
    ids = [c.id for c in reply.tool_calls]
    assert "call_0" not in ids and "" not in ids and len(set(ids)) == 2
    assert [c.seq for c in decision.calls] == [5, 6]


def test_a_huge_number_in_the_arguments_is_an_error_the_model_reads(model: ScriptedModelServer) -> None:
    store = MemoryHistoryStore()
    _run(store)
    model.responder = _raw_calls(("a", "charge", '{"amount": ' + "9" * 5000 + "}"), ("b", "", "{}"))

    decision = _step(store, model).step(StepRequest(run_id="r1"), _deadline())

    assert decision.status is DecisionStatus.TOOL_CALLS and decision.calls == []
    huge, nameless = store.get_item("r1", 3), store.get_item("r1", 4)
    assert isinstance(huge, ToolResult) and huge.error_type is ErrorKind.INVALID_ARGUMENTS
    assert isinstance(nameless, ToolResult) and nameless.error_type is ErrorKind.UNKNOWN_TOOL


# --- the ledger -------------------------------------------------------------------------------


def _dispatched(
    store: MemoryHistoryStore, tool_name: str = "charge", arguments: str = '{"amount": 5}'
) -> ToolCallMessage:
    from toolpipe.shared.messages import ToolCall

    _run(store)
    store.append(
        "r1",
        AssistantMessage(seq=2, turn=1, tool_calls=[ToolCall(id="c", name=tool_name, arguments=arguments)]),
    )
    return ToolCallMessage(run_id="r1", seq=3, message_seq=2, task_token="token")


def _executor(store: MemoryHistoryStore, reporter: Reporter | None = None) -> ToolCallExecutor:
    return ToolCallExecutor(
        store, reporter or Reporter(), Starter(), heartbeat_every=60, sleep=lambda s: None
    )


def test_a_failed_result_write_is_retried_in_process_not_by_running_the_tool_again() -> None:
    store = MemoryHistoryStore()
    message = _dispatched(store)
    store.failing_completes = 2

    outcome = _executor(store).execute(message, lease_seconds=60)

    assert outcome is not None and outcome.status == "ok"
    assert EFFECTS == ["r1:3"]


def test_only_a_tool_that_takes_a_context_reads_the_runs_state() -> None:
    class Counting(MemoryHistoryStore):
        state_reads = 0

        def load_state(self, run_id: str) -> dict[str, Any]:
            self.state_reads += 1
            return super().load_state(run_id)

    store = Counting()
    outcome = _executor(store).execute(_dispatched(store, "lookup", '{"key": "k"}'), lease_seconds=60)
    assert outcome is not None and outcome.status == "ok" and store.state_reads == 0
    store = Counting()
    outcome = _executor(store).execute(_dispatched(store), lease_seconds=60)  # charge takes a context
    assert outcome is not None and outcome.status == "ok" and store.state_reads == 1


def test_a_worker_that_died_after_a_non_idempotent_tool_leaves_the_call_in_doubt() -> None:
    clock = Clock()
    store = MemoryHistoryStore(clock=clock)
    message = _dispatched(store)
    store.failing_completes = 3  # every in-process attempt: the invocation fails
    with pytest.raises(ConnectionError):
        _executor(store).execute(message, lease_seconds=60)
    clock.now += 61  # the lease runs out; SQS redelivers

    reporter = Reporter()
    outcome = _executor(store, reporter).execute(message, lease_seconds=60, attempt=2)

    assert EFFECTS == ["r1:3"]  # charged once, never twice
    result = store.get_item("r1", 3)
    assert isinstance(result, ToolResult) and result.error_type is ErrorKind.IN_DOUBT
    assert "may or may not have taken effect" in result.content
    assert outcome is not None and reporter.answers == [("token", {"seq": 3, "status": "error"})]


def test_an_idempotent_tool_runs_again_after_its_worker_died() -> None:
    clock = Clock()
    store = MemoryHistoryStore(clock=clock)
    message = _dispatched(store, "lookup", '{"key": "k"}')
    store.failing_completes = 3
    with pytest.raises(ConnectionError):
        _executor(store).execute(message, lease_seconds=60)
    clock.now += 61

    outcome = _executor(store).execute(message, lease_seconds=60, attempt=2)

    assert EFFECTS == ["k", "k"] and outcome is not None and outcome.status == "ok"
    result = store.get_item("r1", 3)
    assert isinstance(result, ToolResult) and result.content == "value of k" and result.attempts == 2


def test_a_delivery_during_a_live_claim_is_retried_later_and_a_late_one_answers_from_the_result() -> None:
    store = MemoryHistoryStore()
    message = _dispatched(store)
    store.claim_call("r1", 3, lease_seconds=60)
    with pytest.raises(CallInProgressError):
        _executor(store).execute(message, lease_seconds=60)
    assert EFFECTS == []

    other = MemoryHistoryStore()
    message = _dispatched(other)
    reporter = Reporter()
    _executor(other, reporter).execute(message, lease_seconds=60)
    _executor(other, reporter).execute(message, lease_seconds=60)
    assert EFFECTS == ["r1:3"] and len(reporter.answers) == 2


def test_a_call_whose_task_no_longer_waits_is_not_run() -> None:
    store = MemoryHistoryStore()
    message = _dispatched(store)
    reporter = Reporter()
    reporter.closed.add("token")

    assert _executor(store, reporter).execute(message, lease_seconds=60) is None
    assert EFFECTS == [] and store.get_item("r1", 3) is None


# --- child runs -------------------------------------------------------------------------------


def test_agent_tools_nest_at_most_max_agent_depth_deep() -> None:
    store = MemoryHistoryStore()
    starter = Starter()
    from toolpipe.shared.messages import ToolCall

    record = RunRecord(run_id="deep", agent="loop", status=RunStatus.RUNNING, root_run_id="root", depth=3)
    store.create_run(
        RunRecord(run_id="root", agent="loop", status=RunStatus.RUNNING),
        UserMessage(seq=1, turn=0, content="x"),
    )
    store.create_run(record, UserMessage(seq=1, turn=0, content="go"))
    store.append(
        "deep",
        AssistantMessage(
            seq=2, turn=1, tool_calls=[ToolCall(id="c", name="again", arguments='{"task": "t"}')]
        ),
    )
    executor = ToolCallExecutor(store, Reporter(), starter, heartbeat_every=60)

    outcome = executor.execute(
        ToolCallMessage(run_id="deep", seq=3, message_seq=2, task_token="t"), lease_seconds=60
    )

    assert outcome is not None and outcome.status == "error" and starter.started == []
    result = store.get_item("deep", 3)
    assert isinstance(result, ToolResult) and result.error_type is ErrorKind.AGENT_DEPTH


def test_a_child_run_stops_when_the_trees_budget_is_spent(model: ScriptedModelServer) -> None:
    store = MemoryHistoryStore()
    AGENTS["loop"] = Agent(
        name="loop", instructions="Delegate.", tools=[agent_tool("loop", name="again")], max_tokens=100
    )
    _run(store, "root", "loop")
    _run(store, "child", "loop", root_run_id="root", depth=1)
    store.record_model_call(
        "root", 1, Usage(prompt_tokens=90, completion_tokens=20, model_calls=1, tool_calls=1)
    )

    decision = _step(store, model).step(StepRequest(run_id="child"), _deadline())

    assert decision.status is DecisionStatus.LIMIT and model.requests == []
    assert "the root agent's max_tokens is 100" in (store.get_run("child").error or "")


def test_a_root_runs_tree_budget_is_read_with_its_record_and_counted_by_its_own_update() -> None:
    class Counting(MemoryHistoryStore):
        tree_reads = 0

        def tree_usage(self, root_run_id: str) -> Usage:
            self.tree_reads += 1
            return super().tree_usage(root_run_id)

    store = Counting()
    AGENTS["spender"] = Agent(name="spender", instructions="Spend.", tools=[], max_tokens=100)
    _run(store, "root", "spender")
    store.record_model_call("root", 1, Usage(prompt_tokens=60, model_calls=1))
    assert store.get_run("root").tree_usage == Usage(prompt_tokens=60, model_calls=1)
    # The next call's own update answers with the tree's totals: they are past the budget.
    assert store.record_model_call("root", 2, Usage(prompt_tokens=50, model_calls=1)) == Usage(
        prompt_tokens=110, model_calls=2
    )
    assert store.record_model_call("root", 2, Usage(prompt_tokens=50, model_calls=1)) is None  # counted
    with ScriptedModelServer(ScriptResponder([])) as server:
        decision = _step(store, server).step(StepRequest(run_id="root"), _deadline())
        assert decision.status is DecisionStatus.LIMIT and server.requests == []
    assert store.tree_reads == 0


def _step_past_the_event_budget(
    store: MemoryHistoryStore, model: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> tuple[Decision, Starter]:
    """A turn, its result, then the step that finds the execution's history near its limit."""
    monkeypatch.setenv("TOOLPIPE_EXECUTION_EVENT_BUDGET", "150")
    _run(store)
    starter = Starter()
    step = _step(store, model, starter)
    model.responder = _raw_calls(("a", "lookup", '{"key": "k"}'))
    step.step(StepRequest(run_id="r1", state_machine_arn="arn:sm"), _deadline())
    store.append("r1", ToolResult(seq=3, turn=1, call_id="a", tool="lookup", content="v", status="ok"))
    return step.step(StepRequest(run_id="r1", state_machine_arn="arn:sm", results=[]), _deadline()), starter


def test_a_long_run_continues_in_a_fresh_execution(
    model: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryHistoryStore()
    decision, starter = _step_past_the_event_budget(store, model, monkeypatch)

    assert decision.status is DecisionStatus.CONTINUED and starter.started == [("r1", 2)]
    assert store.get_run("r1").execution == 2 and len(model.requests) == 1


class CancelledMeanwhile(MemoryHistoryStore):
    """A cancel that lands between a step's read of its run and its naming the next execution."""

    def set_execution(self, run_id: str, execution: int, start_turn: int) -> bool:
        self.finish_run(run_id, RunStatus.CANCELLED)
        return super().set_execution(run_id, execution, start_turn)


def test_a_run_cancelled_as_it_would_continue_in_a_fresh_execution_starts_none(
    model: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CancelledMeanwhile()
    decision, starter = _step_past_the_event_budget(store, model, monkeypatch)

    assert decision.status is DecisionStatus.FAILED and starter.started == []
    assert store.get_run("r1").status is RunStatus.CANCELLED and store.get_run("r1").execution == 1


@tool
def hoard(kilobytes: int, ctx: ToolContext) -> str:
    """Keep a lot in the run's state.

    Args:
        kilobytes: How much.
    """
    ctx.state["pile"] = "x" * (kilobytes * 1000)
    return "kept"


def test_run_state_past_its_item_limit_is_the_tools_error_not_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(AGENTS, "payer", Agent(name="payer", instructions="Pay.", tools=[hoard]))
    store = MemoryHistoryStore()
    message = _dispatched(store, "hoard", '{"kilobytes": 500}')

    outcome = _executor(store).execute(message, lease_seconds=60)

    assert outcome is not None and outcome.status == "error"
    result = store.get_item("r1", 3)
    assert isinstance(result, ToolResult) and "a run keeps at most 300000" in result.content
    assert store.load_state("r1") == {}


def test_a_step_of_an_execution_that_already_handed_the_run_on_restarts_the_next_one(
    model: ScriptedModelServer,
) -> None:
    store = MemoryHistoryStore()
    _run(store)
    store.set_execution("r1", 2, 0)  # recorded, then the step died before starting it
    starter = Starter()

    decision = _step(store, model, starter).step(
        StepRequest(run_id="r1", state_machine_arn="arn:sm", execution="r1"), _deadline()
    )

    assert decision.status is DecisionStatus.CONTINUED and starter.started == [("r1", 2)]
    assert model.requests == []


def test_a_schema_tool_called_by_its_own_name_keeps_its_idempotent_declaration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from toolpipe.shared.tools import schema_tool

    lookup_crm = schema_tool(
        {"name": "crm.lookup", "description": "Look up.", "parameters": {"properties": {}}},
        lambda args: EFFECTS.append("crm") or "found",
        idempotent=True,
    )
    monkeypatch.setitem(AGENTS, "payer", Agent(name="payer", instructions="Pay.", tools=[lookup_crm]))
    clock = Clock()
    store = MemoryHistoryStore(clock=clock)
    message = _dispatched(store, "crm.lookup", "{}")  # the model echoed the dotted name
    store.failing_completes = 3
    with pytest.raises(ConnectionError):
        _executor(store).execute(message, lease_seconds=60)
    clock.now += 61

    outcome = _executor(store).execute(message, lease_seconds=60, attempt=2)

    assert outcome is not None and outcome.status == "ok" and EFFECTS == ["crm", "crm"]


def test_a_step_decided_again_dispatches_only_calls_without_results(model: ScriptedModelServer) -> None:
    store = MemoryHistoryStore()
    _run(store)
    model.responder = _raw_calls(("a", "lookup", '{"key": "1"}'), ("b", "lookup", '{"key": "2"}'))
    step = _step(store, model)
    step.step(StepRequest(run_id="r1"), _deadline())
    store.append("r1", ToolResult(seq=3, turn=1, call_id="a", tool="lookup", content="v", status="ok"))

    # The execution that dispatched both is gone (a restart): a fresh one starts with no results.
    decision = step.step(StepRequest(run_id="r1"), _deadline())

    assert [c.seq for c in decision.calls] == [4] and len(model.requests) == 1


# --- found by probing: each would leave a call, a run or a parent without its answer ---------


@tool
def cancelled(n: int) -> str:
    """Raise what asyncio raises on cancellation (a BaseException).

    Args:
        n: Anything.
    """
    import asyncio

    raise asyncio.CancelledError()


@tool
def unstorable(n: int, ctx: ToolContext) -> str:
    """Keep something that is not JSON in the run's state, and answer with a lone surrogate.

    Args:
        n: Anything.
    """
    ctx.state["odd"] = {1, 2}
    return "half an emoji: \ud83d"


class ExplodingHook(Hooks):
    def before_tool(self, event: BeforeTool) -> None:
        raise RuntimeError("the hook broke")


@pytest.mark.parametrize(
    ("tools", "hooks", "name", "expected"),
    [
        ([cancelled], [], "cancelled", "CancelledError"),
        ([unstorable], [], "unstorable", "TypeError"),
        ([charge], [ExplodingHook()], "charge", "RuntimeError: the hook broke"),
    ],
)
def test_whatever_a_tool_or_hook_raises_ends_the_call_with_a_result(
    monkeypatch: pytest.MonkeyPatch, tools: list[Any], hooks: list[Any], name: str, expected: str
) -> None:
    monkeypatch.setitem(AGENTS, "payer", Agent(name="payer", instructions="Pay.", tools=tools, hooks=hooks))
    store = MemoryHistoryStore()
    message = _dispatched(store, name, '{"n": 1, "amount": 1}' if name == "charge" else '{"n": 1}')

    outcome = _executor(store).execute(message, lease_seconds=60)

    assert outcome is not None and outcome.status == "error"
    result = store.get_item("r1", 3)
    assert isinstance(result, ToolResult) and result.error_type is ErrorKind.TOOL_FAILED
    assert expected in result.content and store.claim_call("r1", 3, 60).state == "done"


def test_a_result_with_a_lone_surrogate_is_stored() -> None:
    store = MemoryHistoryStore()
    _run(store)
    from toolpipe.shared.messages import ToolCall

    store.append(
        "r1", AssistantMessage(seq=2, turn=1, tool_calls=[ToolCall(id="c", name="x", arguments="{}")])
    )
    result = ToolResult(seq=3, turn=1, call_id="c", tool="x", content=text_safe("a\ud83db"), status="ok")
    assert result.content == "a?b"


def test_a_child_whose_ending_died_before_answering_answers_on_the_retry(model: ScriptedModelServer) -> None:
    store = MemoryHistoryStore()
    _run(store, "parent", "loop")
    from toolpipe.shared.messages import ParentCall, ToolCall

    store.append(
        "parent",
        AssistantMessage(
            seq=2, turn=1, tool_calls=[ToolCall(id="c", name="again", arguments='{"task": "t"}')]
        ),
    )
    parent_call = ParentCall(run_id="parent", call_id="c", seq=3, turn=1, tool="again")
    _run(store, "child", "loop", parent=parent_call, root_run_id="parent", depth=1)
    store.put_parent_token("child", "parent-token")
    store.finish_run("child", RunStatus.SUCCEEDED, output="x" * 10_000)  # recorded; then the invocation died

    decision = _step(store, model).step(StepRequest(run_id="child"), _deadline())

    assert decision.status is DecisionStatus.FINAL and model.requests == []
    answer = store.get_item("parent", 3)
    assert isinstance(answer, ToolResult) and answer.status == "ok" and answer.content == "x" * 10_000


def test_a_later_failure_never_replaces_a_childs_first_ending(model: ScriptedModelServer) -> None:
    store = MemoryHistoryStore()
    _run(store, "parent", "loop")
    from toolpipe.shared.messages import FailRequest, ParentCall

    parent_call = ParentCall(run_id="parent", call_id="c", seq=3, turn=1, tool="again")
    _run(store, "child", "loop", parent=parent_call, root_run_id="parent", depth=1)
    store.finish_run("child", RunStatus.SUCCEEDED, output="done")

    _step(store, model).fail(FailRequest(action="fail", run_id="child", error={"Error": "ExecutionAborted"}))

    answer = store.get_item("parent", 3)
    assert isinstance(answer, ToolResult) and answer.status == "ok" and answer.content == "done"


def test_a_run_whose_execution_cannot_start_is_failed_not_left_running() -> None:
    from toolpipe.shared.messages import StartRunRequest
    from toolpipe.shared.runs import RunStarter

    class Refusing:
        def start(
            self, run_id: str, execution: int = 1, deadline: str | None = None, waits: str = "count"
        ) -> None:
            raise ConnectionError("throttled")

    store = MemoryHistoryStore()
    with pytest.raises(ConnectionError):
        RunStarter(store, Refusing()).start(StartRunRequest(prompt="hi", agent="payer"), "caller")

    [run] = store.runs.values()
    assert run.status is RunStatus.FAILED and "could not be started: throttled" in (run.error or "")


def test_an_idempotency_key_starts_one_run_and_refuses_another_request() -> None:
    from toolpipe.shared.messages import StartRunRequest
    from toolpipe.shared.runs import RunStarter
    from toolpipe.shared.runs.errors import IdempotencyConflictError

    started: list[tuple[str, int]] = []

    class Recording:
        def start(
            self, run_id: str, execution: int = 1, deadline: str | None = None, waits: str = "count"
        ) -> None:
            started.append((run_id, execution))

    store = MemoryHistoryStore()
    starter = RunStarter(store, Recording())
    first = starter.start(StartRunRequest(prompt="hi", agent="payer"), "alice", idempotency_key="k1")
    again = starter.start(StartRunRequest(prompt="hi", agent="payer"), "alice", idempotency_key="k1")
    assert not first.replayed and again.replayed and again.record.run_id == first.record.run_id
    # A retry re-starts the execution it names (a no-op when it exists): a start that died
    # between the write and the execution is finished by the retry.
    assert started == [(first.record.run_id, 1)] * 2
    with pytest.raises(IdempotencyConflictError, match="k1"):
        starter.start(StartRunRequest(prompt="bye", agent="payer"), "alice", idempotency_key="k1")
    # A retry may spell the same request differently: still the same request.
    spelled = [
        {"input": "x", "agent": "payer", "metadata": {"a": "1", "b": "2"}, "tools": ["charge", "lookup"]},
        {"agent": "payer", "input": "x", "metadata": {"b": "2", "a": "1"}, "tools": ["lookup", "charge"]},
    ]
    same = [
        starter.start(StartRunRequest.model_validate(body), "alice", idempotency_key="k2") for body in spelled
    ]
    assert not same[0].replayed and same[1].replayed and same[0].record.run_id == same[1].record.run_id
    bare = starter.start(StartRunRequest(input="y", agent="payer"), "alice", idempotency_key="k3")
    empty = starter.start(
        StartRunRequest(input="y", agent="payer", metadata={}), "alice", idempotency_key="k3"
    )
    assert empty.replayed and empty.record.run_id == bare.record.run_id
    # The key is the caller's own: another caller's same key is another run.
    other = starter.start(StartRunRequest(prompt="hi", agent="payer"), "bob", idempotency_key="k1")
    assert not other.replayed and other.record.run_id != first.record.run_id
    assert len(store.runs) == 4


@tool(return_direct=True)
def report(pages: int) -> str:
    """Render a long report; its text is the answer.

    Args:
        pages: How many.
    """
    return "p" * (pages * 10_000)


def test_a_long_direct_answer_is_the_whole_result_not_the_models_preview(
    model: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(AGENTS, "payer", Agent(name="payer", instructions="Report.", tools=[report]))
    store = MemoryHistoryStore()
    message = _dispatched(store, "report", '{"pages": 3}')
    _executor(store).execute(message, lease_seconds=60)

    decision = _step(store, model).step(StepRequest(run_id="r1", results=[]), _deadline())

    assert decision.status is DecisionStatus.FINAL
    run = store.get_run("r1")
    assert run.output_chars == 30_000 and run.output_ref and store.get_result(run.output_ref) == "p" * 30_000


def test_return_direct_and_output_type_cannot_be_combined() -> None:
    from pydantic import BaseModel

    from toolpipe.shared.errors import DefinitionError

    class Receipt(BaseModel):
        total: float

    with pytest.raises(DefinitionError, match="return_direct"):
        Agent(name="x", instructions="x", tools=[report], output_type=Receipt)


def test_a_step_that_died_after_storing_its_reply_still_counts_the_model_call(
    model: ScriptedModelServer,
) -> None:
    from toolpipe.shared.messages import ToolCall, Usage

    store = MemoryHistoryStore()
    _run(store)
    used = Usage(prompt_tokens=100, completion_tokens=20, model_calls=1, tool_calls=1)
    reply = AssistantMessage(
        seq=2, turn=1, tool_calls=[ToolCall(id="a", name="lookup", arguments='{"key": "k"}')], usage=used
    )
    store.append("r1", reply)  # stored; then the invocation died before counting it
    step = _step(store, model)

    for _ in range(2):  # the retry, and a second retry that must not count it again
        decision = step.step(StepRequest(run_id="r1"), _deadline())
        assert [c.seq for c in decision.calls] == [3]

    run = store.get_run("r1")
    assert run.turn == 1 and run.usage.total_tokens == 120 and run.usage.model_calls == 1
    assert store.tree_usage("r1").tool_calls == 1 and model.requests == []


def test_blank_is_what_strip_removes_in_every_regex_dialect() -> None:
    # Re-measured over every code point: the pattern the OpenAPI document states for `input`
    # refuses exactly the texts the model refuses as blank.
    import re

    from pydantic import ValidationError

    from toolpipe.shared.messages import NOT_BLANK_PATTERN, StartRunRequest

    blank = [chr(c) for c in range(0x110000) if not re.search(NOT_BLANK_PATTERN, chr(c))]
    assert blank == [chr(c) for c in range(0x110000) if chr(c).isspace()]
    for text in ("\x1c", "\u3000 \u2028", "\ufeff", "a"):
        valid = bool(re.search(NOT_BLANK_PATTERN, text))
        assert valid == bool(text.strip())
        try:
            StartRunRequest(input=text)
        except ValidationError:
            assert not valid
        else:
            assert valid
