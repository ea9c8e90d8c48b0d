"""Lambdas die, messages arrive twice, calls time out: nothing is lost or done twice."""

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import CALLS, Pipeline, _pipeline, call
from tests.dynamo_faults import cancellation_body, refused
from toolpipe.infra.cdk.functions import ORCHESTRATOR as ORCHESTRATOR_FUNCTION
from toolpipe.infra.cdk.functions import TOOL_WORKER
from toolpipe.infra.local.isolation import running_as
from toolpipe.infra.local.lambdas import LocalContext, call_handler
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.infra.local.workers import sqs_record
from toolpipe.shared.history import ClaimState
from toolpipe.shared.messages import RunRecord, RunStatus, ToolResult, UserMessage

ORCHESTRATOR = "toolpipe.functions.orchestrator.handler.lambda_handler"
WORKER = "toolpipe.functions.tool_worker.handler.lambda_handler"


def _store(p: Pipeline) -> Any:
    """The orchestrator's store, built as that function: its handler reads its settings from the
    function's environment, which a test outside an invocation does not see."""
    with running_as(p.runtime.functions[ORCHESTRATOR_FUNCTION.name]):
        from toolpipe.functions.orchestrator import handler

        return handler.service()._store


def _new_run(p: Pipeline, run_id: str, prompt: str = "hi") -> None:
    """A run record without an execution: the test drives the handlers itself."""
    record = RunRecord(run_id=run_id, agent="tester", status=RunStatus.RUNNING)
    assert _store(p).create_run(record, UserMessage(seq=1, turn=0, content=prompt))


def _sqs_event(body: str, message_id: str = "m-1") -> dict[str, Any]:
    return {"Records": [sqs_record({"MessageId": message_id, "Body": body})]}


def _context(name: str) -> LocalContext:
    return LocalContext(function_name=name, timeout_seconds=120)


def test_a_retried_model_step_does_not_ask_the_model_again(pipeline: Pipeline) -> None:
    _new_run(pipeline, "retry-1")
    pipeline.script(Reply(tool_calls=[call("count_once", label="x")]))
    step = {"action": "step", "run_id": "retry-1", "results": []}

    first = call_handler(ORCHESTRATOR, step, _context(ORCHESTRATOR_FUNCTION.name))
    second = call_handler(ORCHESTRATOR, step, _context(ORCHESTRATOR_FUNCTION.name))

    assert first == second
    assert first["status"] == "tool_calls" and first["calls"][0]["seq"] == 3
    assert len(pipeline.model.requests) == 1
    assert [i.kind for i in _store(pipeline).load_history("retry-1")] == ["user", "assistant"]


@pytest.fixture
def held() -> Iterator[Pipeline]:
    """No local workers: dispatched calls wait in the queue for the test to deliver them."""
    for pipeline in _pipeline(workers=0):
        pipeline.runtime.drain_seconds = 2  # a test may leave a call waiting: stop it at the end
        yield pipeline


def waiting_calls(p: Pipeline, count: int = 1, timeout: float = 20) -> list[dict[str, Any]]:
    """The SQS messages of calls whose Step Functions tasks wait (real task tokens)."""
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(messages) < count:
        assert time.monotonic() < deadline, f"only {len(messages)} of {count} calls were dispatched"
        got = p.runtime.sqs.receive_message(
            QueueUrl=p.runtime.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"]
        )
        messages.extend(got.get("Messages", []))
        time.sleep(0.02)
    return messages


def deliver(message: dict[str, Any], delivery: str = "m-1") -> dict[str, Any]:
    return dict(call_handler(WORKER, _sqs_event(message["Body"], delivery), _context(TOOL_WORKER.name)))


def test_a_duplicate_delivery_does_not_run_the_tool_twice(held: Pipeline) -> None:
    held.script(Reply(tool_calls=[call("count_once", label="x")]), Reply(content="done"))
    run_id = held.start("count")
    [message] = waiting_calls(held)

    for attempt in range(2):
        assert deliver(message, f"m-{attempt}") == {"batchItemFailures": []}

    assert held.finish(run_id)["run"]["status"] == "succeeded"
    assert CALLS.counts == {"count_once": 1}
    result = _store(held).get_item(run_id, 3)
    assert result.kind == "tool_result" and result.content == "counted x"


def _worker_dynamodb(p: Pipeline) -> Any:
    """The DynamoDB client of the tool worker's store, built by its handler as its function."""
    with running_as(p.runtime.functions[TOOL_WORKER.name]):
        from toolpipe.functions.tool_worker import handler

        return handler.service()._store._table.meta.client


@pytest.mark.parametrize("reason", ["ThrottlingError", "TransactionConflict"])
def test_a_result_write_cancelled_by_throttling_or_a_conflict_is_written_again(
    held: Pipeline, reason: str
) -> None:
    """Not a lost race: no other delivery stored a result, so the worker writes its own again
    rather than look for one, find none and leave the call in doubt."""
    held.script(Reply(tool_calls=[call("count_once", label="x")]), Reply(content="done"))
    run_id = held.start("count")
    [message] = waiting_calls(held)

    # `complete_call`'s transaction: the result, then the ledger item, which DynamoDB refused.
    with refused(_worker_dynamodb(held), "TransactWriteItems", cancellation_body("None", reason)) as refusals:
        assert deliver(message) == {"batchItemFailures": []}

    assert len(refusals) == 1
    assert held.finish(run_id)["run"]["status"] == "succeeded"
    assert CALLS.counts == {"count_once": 1}
    result = _store(held).get_item(run_id, 3)
    assert (result.content, result.status, result.attempts) == ("counted x", "ok", 1)
    tool_message = next(m for m in held.model.requests[1]["messages"] if m["role"] == "tool")
    assert tool_message["content"] == "counted x"


def test_a_result_write_that_lost_its_race_answers_with_the_stored_result(held: Pipeline) -> None:
    held.script(Reply(tool_calls=[call("count_once", label="x")]), Reply(content="done"))
    run_id = held.start("count")
    [message] = waiting_calls(held)
    store = _store(held)
    reply = store.get_item(run_id, 2)
    winner = ToolResult(
        seq=3,
        turn=reply.turn,
        call_id=reply.tool_calls[0].id,
        tool="count_once",
        content="stored first",
        status="ok",
    )
    raced: list[bool] = []

    def another_delivery_stores_first(**_: Any) -> None:
        # While the tool ran, this delivery's lease ran out (as recovery ends a dead owner's) and
        # a redelivery took the call over and stored its outcome: the transaction below loses.
        if raced:
            return
        store._table.update_item(
            Key={"pk": f"RUN#{run_id}", "sk": "CALL#000003"},
            UpdateExpression="SET lease_until = :gone",
            ExpressionAttributeValues={":gone": 0},
        )
        claim = store.claim_call(run_id, 3, lease_seconds=60)
        assert claim.state is ClaimState.TAKEN_OVER
        raced.append(store.complete_call(run_id, winner, claim.owner))

    client = _worker_dynamodb(held)
    client.meta.events.register("before-call.dynamodb.TransactWriteItems", another_delivery_stores_first)
    try:
        assert deliver(message) == {"batchItemFailures": []}
    finally:
        client.meta.events.unregister(
            "before-call.dynamodb.TransactWriteItems", another_delivery_stores_first
        )

    assert raced == [True]  # the other delivery stored its result first
    assert held.finish(run_id)["run"]["status"] == "succeeded"
    assert CALLS.counts == {"count_once": 1}
    assert _store(held).get_item(run_id, 3).content == "stored first"
    tool_message = next(m for m in held.model.requests[1]["messages"] if m["role"] == "tool")
    assert tool_message["content"] == "stored first"


def test_a_delivery_while_another_runs_the_call_is_retried_later(held: Pipeline) -> None:
    held.script(Reply(tool_calls=[call("count_once", label="x")]), Reply(content="done"))
    run_id = held.start("count")
    [message] = waiting_calls(held)
    assert _store(held).claim_call(run_id, 3, lease_seconds=60).state == "new"  # another delivery, running

    assert deliver(message, "m-2") == {"batchItemFailures": [{"itemIdentifier": "m-2"}]}
    assert CALLS.counts == {}


def test_a_malformed_queue_message_is_reported_not_dropped(pipeline: Pipeline) -> None:
    response = call_handler(WORKER, _sqs_event('{"run_id": "x"}', "bad-1"), _context(TOOL_WORKER.name))
    assert response == {"batchItemFailures": [{"itemIdentifier": "bad-1"}]}


@pytest.fixture
def short_calls() -> Iterator[Pipeline]:
    yield from _pipeline({"TOOLPIPE_CALL_TIMEOUT_SECONDS": "1", "TOOLPIPE_CALL_HEARTBEAT_SECONDS": "1"})


def test_a_call_that_times_out_becomes_an_error_result(short_calls: Pipeline) -> None:
    short_calls.script(Reply(tool_calls=[call("slow", seconds=3)]), Reply(content="too slow then"))
    body = short_calls.finish(short_calls.start("be slow"))

    assert body["run"]["status"] == "succeeded"
    tool_message = next(m for m in short_calls.model.requests[1]["messages"] if m["role"] == "tool")
    assert tool_message["content"] in (
        "Error: the tool call did not complete (States.Timeout).",
        "Error: the tool call did not complete (States.HeartbeatTimeout).",
    )
    assert [m["kind"] for m in body["messages"]] == ["user", "assistant", "tool_result", "assistant"]


def test_a_retried_step_keeps_valid_calls_beside_invalid_ones(pipeline: Pipeline) -> None:
    """The orchestrator answered the invalid call itself, so its reply is no longer the last
    history item; a retry must still re-dispatch the valid call, not give up on it."""
    _new_run(pipeline, "retry-2")
    pipeline.script(Reply(tool_calls=[call("no_such_tool"), call("count_once", label="x")]))
    step = {"action": "step", "run_id": "retry-2", "results": []}

    first = call_handler(ORCHESTRATOR, step, _context(ORCHESTRATOR_FUNCTION.name))
    second = call_handler(ORCHESTRATOR, step, _context(ORCHESTRATOR_FUNCTION.name))

    assert first == second
    assert [c["tool"] for c in second["calls"]] == ["count_once"]
    assert len(pipeline.model.requests) == 1
    history = _store(pipeline).load_history("retry-2")
    assert [i.kind for i in history] == ["user", "assistant", "tool_result"]
    assert history[2].error_type == "UnknownToolError"
