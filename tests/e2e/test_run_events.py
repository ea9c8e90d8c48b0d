"""Run events on the local bus, read as a subscriber reads them: a rule on the bus sends every
`toolpipe` event to a queue. What arrives must match the checked-in schemas (docs/events/)."""

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.conftest import CALLS, Pipeline, _pipeline, call
from tests.e2e.test_execution_ended import _stop, _wait_until_waiting_on_a_call, holding  # noqa: F401
from tests.functional.test_resilience import deliver, waiting_calls
from toolpipe.infra.local.runtime import LocalRuntime
from toolpipe.infra.local.scripted_model import HttpError, Reply
from toolpipe.shared.agents import AGENTS, Agent, agent_tool

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "events"
Events = list[dict[str, Any]]


def subscribe(runtime: LocalRuntime) -> Callable[[Callable[[Events], bool]], Events]:
    """A queue fed by a rule on the runtime's bus; returns a reader that collects events until
    `done(events)` holds, then what else is already queued."""
    queue_url = runtime.sqs.create_queue(QueueName="run-events")["QueueUrl"]
    queue_arn = runtime.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    runtime.events.put_rule(
        Name="all-run-events",
        EventBusName=runtime.event_bus_name,
        EventPattern=json.dumps({"source": ["toolpipe"]}),
    )
    runtime.events.put_targets(
        Rule="all-run-events", EventBusName=runtime.event_bus_name, Targets=[{"Id": "q", "Arn": queue_arn}]
    )

    def read(done: Callable[[Events], bool], timeout: float = 10) -> Events:
        events: Events = []
        deadline = time.monotonic() + timeout
        while True:
            got = runtime.sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
            messages = got.get("Messages", [])
            for message in messages:
                events.append(json.loads(message["Body"]))
                runtime.sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            if done(events) and not messages:
                return events
            assert time.monotonic() < deadline, f"events so far: {[e['detail-type'] for e in events]}"
            time.sleep(0.02)

    return read


def ended(events: Events) -> bool:
    return any(e["detail-type"] in ("RunCompleted", "RunFailed") for e in events)


def validate(events: Events) -> None:
    """Each event's envelope, and its detail against the checked-in schema of its detail-type."""
    for event in events:
        assert event["source"] == "toolpipe"
        schema = json.loads((SCHEMAS / f"{event['detail-type']}.json").read_text())
        Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER).validate(
            event["detail"]
        )


def of(events: Events, detail_type: str) -> list[dict[str, Any]]:
    return [e["detail"] for e in events if e["detail-type"] == detail_type]


def test_a_run_publishes_started_each_call_and_completed(pipeline: Pipeline) -> None:
    read = subscribe(pipeline.runtime)
    pipeline.script(
        Reply(tool_calls=[call("count_once", label="a"), call("big_output", kilobytes=5)]),
        Reply(content="both done " + "y" * 500),
    )
    run_id = pipeline.start("count and print")
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"

    events = read(lambda e: ended(e) and len(of(e, "ToolCallCompleted")) == 2)

    validate(events)
    assert Counter(e["detail-type"] for e in events) == {
        "RunStarted": 1,
        "ToolCallCompleted": 2,
        "RunCompleted": 1,
    }
    [started] = of(events, "RunStarted")
    assert started["run_id"] == run_id and started["agent"] == "tester"
    assert started["caller"] == pipeline.callers[run_id] and started["parent_run_id"] is None
    calls = sorted(of(events, "ToolCallCompleted"), key=lambda d: d["slot"])
    assert [(c["tool"], c["slot"], c["outcome"]) for c in calls] == [
        ("count_once", 3, "ok"),
        ("big_output", 4, "ok"),
    ]
    assert calls[0]["result_preview"] == "counted a"
    # A preview, never the 5,000-character result.
    assert calls[1]["result_chars"] == 5000 and len(calls[1]["result_preview"]) == 200
    [completed] = of(events, "RunCompleted")
    assert completed["status"] == "succeeded" and completed["turns"] == 2
    assert completed["usage"]["model_calls"] == 2 and completed["usage"]["tool_calls"] == 2
    assert completed["output_chars"] == 510 and completed["output_preview"].startswith("both done y")
    assert len(completed["output_preview"]) == 200


@pytest.fixture
def held() -> Iterator[Pipeline]:
    """No local workers: the test delivers each call itself, as often as it likes."""
    for pipeline in _pipeline(workers=0):
        pipeline.runtime.drain_seconds = 2
        yield pipeline


def test_a_call_delivered_twice_is_published_once(held: Pipeline) -> None:
    read = subscribe(held.runtime)
    held.script(Reply(tool_calls=[call("count_once", label="x")]), Reply(content="done"))
    run_id = held.start("count")
    [message] = waiting_calls(held)

    for delivery in ("m-1", "m-2", "m-3"):
        assert deliver(message, delivery) == {"batchItemFailures": []}
    assert held.finish(run_id)["run"]["status"] == "succeeded"

    events = read(ended)
    validate(events)
    assert CALLS.counts == {"count_once": 1}
    assert [d["slot"] for d in of(events, "ToolCallCompleted")] == [3]
    assert len(of(events, "RunCompleted")) == 1


def test_a_failed_run_publishes_run_failed(pipeline: Pipeline) -> None:
    read = subscribe(pipeline.runtime)
    pipeline.script(HttpError(401, {"error": {"message": "Incorrect API key provided", "type": "auth"}}))
    run_id = pipeline.start("hello")
    assert pipeline.finish(run_id)["run"]["status"] == "failed"

    events = read(ended)

    validate(events)
    assert [e["detail-type"] for e in events] == ["RunStarted", "RunFailed"]
    [failed] = of(events, "RunFailed")
    assert failed["run_id"] == run_id and failed["status"] == "failed"
    assert "401" in failed["error_preview"] and len(failed["error_preview"]) <= 200


def test_calls_the_orchestrator_refuses_and_limits_are_published(pipeline: Pipeline) -> None:
    """Every call's outcome is published once, whoever stored it; a limit is a RunCompleted."""
    read = subscribe(pipeline.runtime)
    refused = Reply(tool_calls=[call("no_such_tool")])
    pipeline.script(refused, refused, refused, refused, refused)
    run_id = pipeline.start("call nonsense")
    assert pipeline.finish(run_id)["run"]["status"] == "limit"

    events = read(ended)

    validate(events)
    calls = of(events, "ToolCallCompleted")
    assert calls and {(c["outcome"], c["error_kind"], c["duration_ms"]) for c in calls} == {
        ("error", "UnknownToolError", None)
    }
    assert len({c["slot"] for c in calls}) == len(calls)
    [completed] = of(events, "RunCompleted")
    assert completed["status"] == "limit" and completed["output_preview"] is None
    assert "max_" in completed["error_preview"]


@pytest.fixture
def with_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(AGENTS, "helper", Agent(name="helper", instructions="You help.", tools=[]))
    parent = dataclasses.replace(AGENTS["tester"], tools=[*AGENTS["tester"].tools, agent_tool("helper")])
    monkeypatch.setitem(AGENTS, "tester", parent)


def test_a_child_run_publishes_its_own_events_and_answers_the_parents_call(
    pipeline: Pipeline, with_helper: None
) -> None:
    read = subscribe(pipeline.runtime)

    def respond(request: dict[str, Any]) -> Reply:
        system = request["messages"][0]["content"]
        if "You help." in system:
            return Reply(content="the helper's answer")
        if any(m["role"] == "tool" for m in request["messages"]):
            return Reply(content="parent done")
        return Reply(tool_calls=[call("helper", task="help me")])

    pipeline.model.responder = respond
    run_id = pipeline.start("delegate")
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"

    events = read(lambda e: len(of(e, "RunCompleted")) == 2)

    validate(events)
    started = {d["run_id"]: d for d in of(events, "RunStarted")}
    [child_id] = set(started) - {run_id}
    assert started[child_id]["parent_run_id"] == run_id and started[child_id]["depth"] == 1
    assert started[child_id]["root_run_id"] == run_id and started[child_id]["agent"] == "helper"
    [answered] = of(events, "ToolCallCompleted")
    assert answered["run_id"] == run_id and answered["tool"] == "helper"
    assert answered["result_preview"] == "the helper's answer"
    assert {d["run_id"] for d in of(events, "RunCompleted")} == {run_id, child_id}


def test_runs_go_on_when_events_cannot_be_published(
    pipeline: Pipeline, caplog: pytest.LogCaptureFixture
) -> None:
    """Events are best-effort: with the bus gone, every publish is refused, and runs still end."""
    pipeline.runtime.events.delete_event_bus(Name=pipeline.runtime.event_bus_name)
    pipeline.script(Reply(tool_calls=[call("count_once", label="x")]), Reply(content="done"))

    with caplog.at_level("WARNING", logger="toolpipe.shared.runs.events"):
        body = pipeline.finish(pipeline.start("count"))

    assert body["run"]["status"] == "succeeded" and CALLS.counts == {"count_once": 1}
    assert "run events not published" in [r.getMessage() for r in caplog.records]


def test_the_docs_example_prints_the_events_of_a_run(capsys: pytest.CaptureFixture[str]) -> None:
    snippet = Path(__file__).resolve().parents[2] / "docs" / "snippets" / "run_events.py"
    example = snippet.read_text()

    exec(compile(example, str(snippet), "exec"), {"__name__": "docs"})

    printed = capsys.readouterr().out.splitlines()
    expected = [line.removeprefix("# ") for line in example.splitlines() if line.startswith("# ")]
    assert printed == expected == ["RunStarted running", "ToolCallCompleted sum", "RunCompleted succeeded"]


def test_a_start_replayed_by_its_idempotency_key_publishes_no_second_run_started(pipeline: Pipeline) -> None:
    read = subscribe(pipeline.runtime)
    pipeline.script(Reply(content="hello"))
    body = {"prompt": "hi", "agent": "tester"}
    started = [
        pipeline.runtime.api("POST", "/runs", body, headers={"Idempotency-Key": "k-1"}) for _ in range(3)
    ]
    assert {b["run_id"] for _, b in started} == {started[0][1]["run_id"]}
    pipeline.finish(started[0][1]["run_id"])

    events = read(ended)
    assert [e["detail-type"] for e in events] == ["RunStarted", "RunCompleted"]


def test_a_run_whose_execution_is_stopped_publishes_run_failed(pipeline: Pipeline, holding: None) -> None:  # noqa: F811
    """The execution-ended path (the stack's rule on execution status changes) ends the run."""
    read = subscribe(pipeline.runtime)
    pipeline.script(Reply(tool_calls=[call("hold", label="x")]))
    run_id = pipeline.start("take your time")
    _wait_until_waiting_on_a_call(pipeline, run_id)

    _stop(pipeline, run_id)
    assert pipeline.finish(run_id)["run"]["status"] == "failed"

    events = read(ended)
    validate(events)
    [failed] = of(events, "RunFailed")
    assert failed["error_preview"] == "execution aborted (stopped outside the run)"


@pytest.fixture
def held_short_calls() -> Iterator[Pipeline]:
    """Calls time out after 1 s, and the test delivers them itself."""
    env = {"TOOLPIPE_CALL_TIMEOUT_SECONDS": "1", "TOOLPIPE_CALL_HEARTBEAT_SECONDS": "1"}
    for pipeline in _pipeline(env, workers=0):
        pipeline.runtime.drain_seconds = 2
        yield pipeline


def test_a_call_that_timed_out_is_published_once_though_its_tool_finished_later(
    held_short_calls: Pipeline,
) -> None:
    """The orchestrator stores "did not complete" when the task times out; the worker's late
    result loses the slot, and publishes nothing."""
    p = held_short_calls
    read = subscribe(p.runtime)
    p.script(Reply(tool_calls=[call("slow", seconds=3)]), Reply(content="too slow then"))
    run_id = p.start("be slow")
    [message] = waiting_calls(p)

    assert deliver(message) == {"batchItemFailures": []}  # returns when the tool has
    assert p.finish(run_id)["run"]["status"] == "succeeded"

    events = read(ended)
    validate(events)
    [timed_out] = of(events, "ToolCallCompleted")
    assert (timed_out["slot"], timed_out["outcome"], timed_out["error_kind"]) == (3, "error", "NotCompleted")
