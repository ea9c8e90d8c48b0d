"""One OpenTelemetry trace per run (issue 22): a run that hands off, runs a child run and waits
for a person across a restart of the local runtime, exported to an OTLP receiver."""

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CALLS, GATE, GATE_REACHED, TEST_AGENT, _pipeline, call, wait_for_gate
from tests.e2e.test_approvals import wire_money
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan
from toolpipe.infra.local.runtime import LocalRuntime
from toolpipe.infra.local.scripted_model import Reply, ScriptedModelServer, ScriptResponder
from toolpipe.shared.agents import AGENTS, Agent, agent_tool

HELPER = Agent(name="helper", instructions="You count things.", tools=[TEST_AGENT.registry.get("count_once")])
PAYER = Agent(name="payer", instructions="You pay people.", tools=[wire_money, agent_tool("helper")])
DESK = Agent(name="desk", instructions="You route requests.", handoffs=[PAYER])
PROMPT = "pay ana five, after counting the apple"


@pytest.fixture(autouse=True)
def agents(monkeypatch: pytest.MonkeyPatch) -> None:
    for agent in (HELPER, PAYER, DESK):
        monkeypatch.setitem(AGENTS, agent.name, agent)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


def _pending(runtime: LocalRuntime, timeout: float = 30) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        _, body = runtime.api("GET", "/approvals?status=pending")
        if body["approvals"]:
            return dict(body["approvals"][0])
        assert time.monotonic() < deadline, "no call waits for approval"
        time.sleep(0.05)


def _one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    [span] = [s for s in spans if s.name == name]
    return span


def test_a_run_is_one_trace_across_a_handoff_a_child_run_and_a_restart_during_a_wait(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    script = [
        Reply(tool_calls=[call("transfer_to_payer")]),  # desk
        Reply(tool_calls=[call("helper", task="count the apple")]),  # payer
        Reply(tool_calls=[call("count_once", label="apple")]),  # helper, the child run
        Reply(content="One apple."),  # helper
        Reply(tool_calls=[call("wire_money", to="ana", amount=5)]),  # payer: waits for a person
        Reply(content="Sent."),  # payer
    ]
    waited = 1.5
    with ScriptedModelServer(ScriptResponder(script)) as model:
        env = {
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "scripted",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_SERVICE_NAME": "toolpipe-test",
        }
        with LocalRuntime(state_dir=tmp_path, extra_env=env) as runtime:
            runtime.drain_seconds = 0.5  # shut down while the call waits
            _, started = runtime.api("POST", "/runs", {"input": PROMPT, "agent": "desk"})
            run_id = started["run_id"]
            approval = _pending(runtime)
        time.sleep(waited)
        with LocalRuntime(state_dir=tmp_path, extra_env=env) as runtime:
            assert runtime.resumed == [run_id]
            assert runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")[0] == 200
            runtime.wait_for_execution(run_id, 60)
            _, body = runtime.api("GET", f"/runs/{run_id}")
            _, decided = runtime.api("GET", f"/approvals/{approval['approval_id']}")
    assert body["run"]["status"] == "succeeded", body["run"]
    assert CALLS.counts == {"count_once": 1, "wire_money": 1}

    spans = receiver.wait_for(lambda got: any(s.name == "invoke_agent desk" for s in got))
    by_id = {s.span_id: s for s in spans}
    assert {s.trace_id for s in spans} == {body["run"]["trace"]["trace_id"]}, "one trace for all of it"
    assert len(by_id) == len(spans), "no span made twice"
    assert {s.service for s in spans} == {"toolpipe-test"}

    root = _one(spans, "invoke_agent desk")
    assert root.parent_span_id == ""
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["toolpipe.run.active_agent"] == "payer"

    def children_of(span: ReceivedSpan) -> list[str]:
        return sorted(s.name for s in spans if s.parent_span_id == span.span_id)

    assert children_of(root) == [
        "await approval wire_money",
        "chat gpt-4o-mini",
        "chat gpt-4o-mini",
        "chat gpt-4o-mini",
        "chat gpt-4o-mini",
        "execute_tool helper",
        "execute_tool transfer_to_payer",
        "execute_tool wire_money",
        "handoff desk -> payer",
    ]
    child = _one(spans, "invoke_agent helper")
    assert child.parent_span_id == _one(spans, "execute_tool helper").span_id
    assert children_of(child) == ["chat gpt-4o-mini", "chat gpt-4o-mini", "execute_tool count_once"]

    chat = next(s for s in spans if s.name.startswith("chat "))
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "gpt-4o-mini"
    assert chat.attributes["gen_ai.usage.input_tokens"] > 0
    assert chat.attributes["gen_ai.response.finish_reasons"]

    wait = _one(spans, "await approval wire_money")
    assert wait.attributes["toolpipe.wait.outcome"] == "approved"
    assert wait.attributes["toolpipe.wait.decided_by"] == decided["decided_by"]
    assert wait.seconds >= waited  # the whole wait, the restart included
    recorded = _epoch(decided["decided_at"]) - _epoch(decided["created_at"])
    assert abs(wait.seconds - recorded) < 0.01
    paid = _one(spans, "execute_tool wire_money")
    assert paid.start_ns >= wait.end_ns, "the call ran after the wait"
    assert paid.attributes["toolpipe.call.status"] == "ok"
    assert paid.attributes["toolpipe.call.in_doubt"] is False

    # No content in spans unless the user opts in: not the prompt, no argument, no result.
    text = repr([s.attributes for s in spans])
    for secret in (PROMPT, "ana", "One apple", "count the apple", "Sent."):
        assert secret not in text


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def test_a_run_started_with_a_traceparent_joins_the_callers_trace(receiver: OtlpReceiver) -> None:
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    for pipeline in _pipeline({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}):
        pipeline.script(Reply(tool_calls=[call("count_once", label="pear")]), Reply(content="Counted."))
        status, started = pipeline.runtime.api(
            "POST",
            "/runs",
            {"input": "count the pear", "agent": "tester"},
            headers={"TraceParent": f"00-{caller_trace}-{caller_span}-01"},
        )
        assert status == 202
        body = pipeline.finish(started["run_id"])
    assert body["run"]["trace"] == {"trace_id": caller_trace, "parent_span_id": caller_span, "sampled": True}
    spans = receiver.wait_for(lambda got: any(s.name == "invoke_agent tester" for s in got))
    assert {s.trace_id for s in spans} == {caller_trace}
    assert _one(spans, "invoke_agent tester").parent_span_id == caller_span


def test_a_collector_that_is_down_changes_nothing_for_the_run() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
    for pipeline in _pipeline({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}):
        pipeline.script(Reply(tool_calls=[call("count_once", label="fig")]), Reply(content="Counted."))
        body = pipeline.finish(pipeline.start("count the fig"))
    assert body["run"]["status"] == "succeeded"
    assert CALLS.counts == {"count_once": 1}


def test_a_child_cancelled_with_its_parent_hangs_under_its_parents_call(receiver: OtlpReceiver) -> None:
    """The child's stopped execution answers the parent's call as cancelled (shared/runs/children.py,
    through the execution-ended rule): the call's span is made, once, and the child's hangs under it."""
    waiter = Agent(name="waiter", instructions="You wait.", tools=[wait_for_gate])
    asker = Agent(name="asker", instructions="You ask.", tools=[agent_tool("waiter")])
    AGENTS.update({waiter.name: waiter, asker.name: asker})
    GATE.clear()
    GATE_REACHED.clear()
    try:
        for pipeline in _pipeline({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}):
            pipeline.script(
                Reply(tool_calls=[call("waiter", task="wait")]),
                Reply(tool_calls=[call("wait_for_gate", label="x")]),
            )
            run_id = pipeline.start("ask the waiter", agent="asker")
            assert GATE_REACHED.wait(30)
            assert pipeline.runtime.api("POST", f"/runs/{run_id}/cancel")[0] == 200
            pipeline.finish(run_id)
    finally:
        GATE.set()
        AGENTS.pop("waiter")
        AGENTS.pop("asker")
    spans = receiver.wait_for(
        lambda got: {"invoke_agent asker", "invoke_agent waiter"} <= {s.name for s in got}
    )
    call_span = _one(spans, "execute_tool waiter")
    assert call_span.attributes["error.type"] == "ChildRunEnded"
    assert _one(spans, "invoke_agent waiter").parent_span_id == call_span.span_id
    assert call_span.parent_span_id == _one(spans, "invoke_agent asker").span_id
