"""Per-caller quotas on `POST /runs` (issue 19, item 5): runs started a minute and running at once,
answered 429 with `Retry-After` by the real API handler on the local runtime (moto's DynamoDB)."""

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.conftest import Pipeline, _pipeline, call
from toolpipe.infra.cdk.functions import API
from toolpipe.infra.local.isolation import running_as
from toolpipe.infra.local.runtime import LOCAL_CALLER
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.dynamo import QUOTAS_OF_CALLER, RUNNING_SLOTS_SK
from toolpipe.shared.messages import RunRecord, RunStatus, UserMessage
from toolpipe.shared.runs.quota import RUNNING_RETRY_AFTER_SECONDS, START_GRACE_SECONDS, WINDOW_SECONDS

BOB = "arn:aws:iam::000000000000:user/bob"
TABLE = "toolpipe-local"


def _per_minute(limit: int) -> Iterator[Pipeline]:
    yield from _pipeline({"TOOLPIPE_QUOTA_STARTS_PER_MINUTE": str(limit), "TOOLPIPE_QUOTA_RUNNING": "0"})


@pytest.fixture
def two_a_minute() -> Iterator[Pipeline]:
    yield from _per_minute(2)


@pytest.fixture
def two_running() -> Iterator[Pipeline]:
    # No workers: a run that asked for a tool waits for it, running, until it is cancelled.
    for pipeline in _pipeline(
        {"TOOLPIPE_QUOTA_STARTS_PER_MINUTE": "0", "TOOLPIPE_QUOTA_RUNNING": "2"}, workers=0
    ):
        yield pipeline
        pipeline.runtime.drain_seconds = 0  # nothing would answer the calls they wait on


def _start(pipeline: Pipeline, caller: str = LOCAL_CALLER, **headers: str) -> tuple[int, Any, dict[str, str]]:
    return pipeline.runtime.api_response(
        "POST", "/runs", {"input": "hi", "agent": "tester"}, caller=caller, headers=headers
    )


def _metas(pipeline: Pipeline) -> list[dict[str, Any]]:
    items = pipeline.runtime.dynamodb.scan(TableName=TABLE)["Items"]
    return [i for i in items if i["sk"]["S"] == "META"]


def _slots(pipeline: Pipeline, caller: str = LOCAL_CALLER) -> set[str]:
    item = pipeline.runtime.dynamodb.get_item(
        TableName=TABLE, Key={"pk": {"S": f"{QUOTAS_OF_CALLER}{caller}"}, "sk": {"S": RUNNING_SLOTS_SK}}
    ).get("Item", {})
    return set(item.get("runs", {}).get("SS", []))


def _within_one_window(attempt: Any) -> Any:
    """Run `attempt(caller)` until it ran inside one minute window (a boundary crossed mid-way
    resets the count), each time as a fresh caller."""
    for n in range(3):
        window = int(time.time() // WINDOW_SECONDS)
        result = attempt(f"arn:aws:iam::000000000000:user/minute-{n}")
        if int(time.time() // WINDOW_SECONDS) == window:
            return result
    raise AssertionError("three attempts each crossed a minute boundary")


def test_a_caller_over_its_starts_a_minute_gets_429_with_retry_after(two_a_minute: Pipeline) -> None:
    pipeline = two_a_minute
    pipeline.script(*[Reply(content="done")] * 9)

    accepted: dict[str, int] = {}

    def attempt(caller: str) -> tuple[list[int], Any, dict[str, str], int]:
        answers = [_start(pipeline, caller) for _ in range(3)]
        other = _start(pipeline, BOB)[0] if caller.endswith("-0") else 202
        accepted[caller] = sum(a[0] == 202 for a in answers)
        if caller.endswith("-0"):
            accepted[BOB] = int(other == 202)
        return [a[0] for a in answers], answers[2][1], answers[2][2], other

    statuses, refused, headers, other = _within_one_window(attempt)
    assert statuses == [202, 202, 429]
    assert refused == {"statusCode": 429, "message": refused["message"]}
    assert refused["message"].startswith("quota exceeded: at most 2 runs started a minute per caller")
    assert "\n" not in refused["message"]
    assert 1 <= int(headers["Retry-After"]) <= WINDOW_SECONDS
    assert other == 202  # another caller has a quota of its own
    # A refused start wrote nothing: each caller has a run for each start accepted, no more (an
    # attempt that crossed a minute boundary may have had all three accepted).
    callers = [m["caller"]["S"] for m in _metas(pipeline)]
    assert {caller: callers.count(caller) for caller in set(callers)} == accepted


def test_an_idempotent_retry_at_the_limit_is_answered_not_refused_nor_counted(two_a_minute: Pipeline) -> None:
    pipeline = two_a_minute
    pipeline.script(*[Reply(content="done")] * 9)

    def attempt(caller: str) -> list[tuple[int, str | None]]:
        seen = []
        for _ in range(4):  # one run, however often the same key is sent
            status, _, headers = _start(pipeline, caller, **{"Idempotency-Key": "k-1"})
            seen.append((status, headers.get("Idempotent-Replayed")))
        status, _, _ = _start(pipeline, caller)  # the second start of the minute: still free
        seen.append((status, None))
        return seen

    assert _within_one_window(attempt) == [
        (202, None),
        (202, "true"),
        (202, "true"),
        (202, "true"),
        (202, None),
    ]


def test_a_caller_over_its_running_runs_gets_429_until_one_ends(two_running: Pipeline) -> None:
    pipeline = two_running
    pipeline.script(*[Reply(tool_calls=[call("count_once", label="k")])] * 6)
    first, second = (_start(pipeline)[1]["run_id"] for _ in range(2))
    status, refused, headers = _start(pipeline)
    assert status == 429 and headers["Retry-After"] == str(RUNNING_RETRY_AFTER_SECONDS)
    assert refused["message"] == (
        f"quota exceeded: at most 2 runs running at once per caller; try again in {RUNNING_RETRY_AFTER_SECONDS} s"
    )
    assert _slots(pipeline) == {first, second}
    assert _start(pipeline, BOB)[0] == 202
    # Ending a run gives its slot back, once: a second cancel changes nothing.
    assert pipeline.runtime.api("POST", f"/runs/{first}/cancel")[0] == 200
    assert _slots(pipeline) == {second}
    pipeline.runtime.api("POST", f"/runs/{first}/cancel")
    assert _slots(pipeline) == {second}
    status, started, _ = _start(pipeline)
    assert status == 202
    assert _slots(pipeline) == {second, started["run_id"]}
    assert _start(pipeline)[0] == 429


def _api_store(pipeline: Pipeline) -> Any:
    with running_as(pipeline.runtime.functions[API.name]):
        from toolpipe.functions.api import handler

        return handler.services.starter


def test_concurrent_starts_at_the_limit_never_both_pass(two_running: Pipeline) -> None:
    pipeline = two_running
    pipeline.script(*[Reply(tool_calls=[call("count_once", label="k")])] * 12)
    barrier = threading.Barrier(6)
    statuses: list[int] = []

    def start() -> None:
        barrier.wait()
        statuses.append(_start(pipeline)[0])

    threads = [threading.Thread(target=start) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # A start whose transaction met another's may fail (500) and is the caller's to retry; none
    # may pass the limit.
    assert statuses.count(202) == 2 and len(statuses) == 6, statuses
    assert len(_slots(pipeline)) == 2
    assert len([m for m in _metas(pipeline) if m["status"]["S"] == "running"]) == 2


def test_a_slot_an_ended_run_still_holds_is_given_back_at_the_next_start(two_running: Pipeline) -> None:
    """A crash between a run's ending and the give-back of its slot leaves the slot held: the
    next start that finds the slots full gives it back and starts."""
    pipeline = two_running
    pipeline.script(*[Reply(tool_calls=[call("count_once", label="k")])] * 6)
    first, _ = (_start(pipeline)[1]["run_id"] for _ in range(2))
    # The ending written as a crashed finish_run would leave it: status changed, slot kept.
    pipeline.runtime.dynamodb.update_item(
        TableName=TABLE,
        Key={"pk": {"S": f"RUN#{first}"}, "sk": {"S": "META"}},
        UpdateExpression="SET #s = :failed",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={":failed": {"S": "failed"}},
    )
    assert first in _slots(pipeline)
    status, started, _ = _start(pipeline)
    assert status == 202, started
    assert first not in _slots(pipeline) and started["run_id"] in _slots(pipeline)


def test_a_run_whose_start_was_cut_short_is_started_by_the_next_start_at_the_limit(
    two_running: Pipeline,
) -> None:
    """The API died between writing a run (its slot taken) and starting its execution: the run
    is started late, so it runs and ends, instead of holding its slot for good."""
    pipeline = two_running
    pipeline.script(*[Reply(content="late but done")] * 4)
    starter = _api_store(pipeline)
    store = starter._store
    quota = starter._quota
    old = (datetime.now(UTC) - timedelta(seconds=START_GRACE_SECONDS + 5)).isoformat(timespec="milliseconds")
    orphans = []
    for n in range(2):
        record = RunRecord(
            run_id=f"orphan{n}", agent="tester", status=RunStatus.RUNNING, caller=LOCAL_CALLER, created_at=old
        )
        assert store.create_run(
            record, UserMessage(seq=1, turn=0, content="hi"), quota.admission(LOCAL_CALLER)
        )
        orphans.append(record.run_id)
    status, _, headers = _start(pipeline)
    assert status == 429 and headers["Retry-After"] == str(RUNNING_RETRY_AFTER_SECONDS)
    # That refusal started both: they end, and their slots come back.
    for run_id in orphans:
        assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    assert _slots(pipeline) == set()
    assert _start(pipeline)[0] == 202


def _admission(running: int | None = 2, per_minute: int | None = 5) -> Any:
    from toolpipe.shared.history.ports import Admission

    return Admission(
        caller=LOCAL_CALLER,
        window=1,
        window_expires_at=180,
        starts_per_minute=per_minute,
        running=running,
        retry_after={"starts_per_minute": 30, "running": RUNNING_RETRY_AFTER_SECONDS},
    )


def test_a_start_that_met_another_transaction_is_tried_again_and_counted_once(two_running: Pipeline) -> None:
    """DynamoDB cancels a transaction that meets another on the same counter (one caller's
    starts at once): refused, not applied, so it is sent again."""
    from tests.dynamo_faults import cancellation_body, refused

    store = _api_store(two_running)._store
    record = RunRecord(run_id="c-1", agent="tester", status=RunStatus.RUNNING, caller=LOCAL_CALLER)
    # The items: the record, the first message, the cost counters, then the two quota counters.
    conflict = cancellation_body("None", "None", "None", "TransactionConflict", "None")
    with refused(store._table.meta.client, "TransactWriteItems", conflict, conflict) as seen:
        assert store.create_run(record, UserMessage(seq=1, turn=0, content="hi"), _admission())
    assert len(seen) == 2
    assert _slots(two_running) == {"c-1"}
    # A run that exists is answered as such, whatever the quotas say: never refused, never counted.
    full = _admission(running=1, per_minute=1)
    assert not store.create_run(record, UserMessage(seq=1, turn=0, content="hi"), full)
    assert _slots(two_running) == {"c-1"}


def test_a_throttled_quota_count_is_an_error_not_a_refusal(two_running: Pipeline) -> None:
    from botocore.exceptions import ClientError

    from tests.dynamo_faults import cancellation_body, refused

    store = _api_store(two_running)._store
    record = RunRecord(run_id="c-2", agent="tester", status=RunStatus.RUNNING, caller=LOCAL_CALLER)
    throttled = cancellation_body("None", "None", "None", "ConditionalCheckFailed", "ThrottlingError")
    with refused(store._table.meta.client, "TransactWriteItems", throttled), pytest.raises(ClientError):
        store.create_run(record, UserMessage(seq=1, turn=0, content="hi"), _admission())
    assert _slots(two_running) == set()
