"""The model's rate budget on DynamoDB (moto): concurrent takers never pass the rate, a 429's
Retry-After holds every run of the endpoint and model, a retried invocation takes no second slot,
and a wait never passes the run's limits."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from tests.dynamo_faults import cancellation_body, refused
from toolpipe.infra.local import serial
from toolpipe.shared.messages import ParentCall, ResumeRecord, RunRecord, RunStatus
from toolpipe.shared.runs.rate_governor import Go, RateGovernor, Stop, Wait, model_call_key
from toolpipe.shared.settings import RateSettings

TABLE = "budgets"
T0 = 1_800_000_000.0  # a fixed "now", in seconds


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def table() -> Iterator[object]:
    with budget_table() as created:
        yield created


@contextmanager
def budget_table() -> Iterator[object]:
    """The budgets' table on moto (a test module of the governor's users opens it too)."""
    with mock_aws():
        # DynamoDB applies each conditional write atomically; bare moto does not: the local
        # runtime's one-request-at-a-time lock gives it AWS's answer.
        undo = serial.install()
        try:
            ddb = boto3.resource("dynamodb", region_name="us-east-1")
            ddb.create_table(
                TableName=TABLE,
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
            yield ddb.Table(TABLE)
        finally:
            undo()


def _governor(table: object, clock: Clock, per_minute: float = 60, burst: int = 1, **kw: int) -> RateGovernor:
    settings = RateSettings(table_name=TABLE, per_minute=per_minute, burst=burst, **kw)
    return RateGovernor(table, settings, "http://model.example/v1", clock=clock)  # type: ignore[arg-type]


def _run(run_id: str, **fields: object) -> RunRecord:
    return RunRecord(run_id=run_id, agent="a", status="running", created_at="2026-01-01T00:00:00Z", **fields)  # type: ignore[arg-type]


def _slot_at(table: object, run_id: str) -> int:
    item = table.get_item(Key={"pk": f"RUN#{run_id}"})["Item"]  # type: ignore[attr-defined]
    return int(item["slot_at"])


def test_concurrent_takers_never_pass_the_rate(table: object) -> None:
    clock = Clock()
    governor = _governor(table, clock, per_minute=60, burst=3)
    runs = [_run(f"r{i}") for i in range(24)]
    answers: dict[str, object] = {}

    def take(run: RunRecord) -> None:
        answers[run.run_id] = governor.admit(run, "m", model_call_key(run, 1))

    threads = [threading.Thread(target=take, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Three go at once (the burst); every other run holds a slot of its own, one a second.
    assert sum(isinstance(a, Go) for a in answers.values()) == 3
    slots = sorted(_slot_at(table, run.run_id) - int(T0 * 1000) for run in runs)
    assert slots == [0, 0, 0] + [1000 * k for k in range(1, 22)]
    waits = sorted(a.seconds for a in answers.values() if isinstance(a, Wait))
    assert waits == list(range(1, 22))


def test_a_retry_after_holds_every_run_of_the_endpoint_and_model(table: object) -> None:
    clock = Clock()
    governor = _governor(table, clock, per_minute=60, burst=1)
    a, b, c = _run("a"), _run("b"), _run("c")
    assert isinstance(governor.admit(a, "m", "1"), Go)
    held = governor.admit(b, "m", "1")  # b holds the slot a second from now
    assert held == Wait(1, "its turn in the model's rate limit")

    # a's call is answered 429 with Retry-After 5: a waits 5 s, and so does everyone of model m.
    waited = governor.rate_limited(a, "m", 5.0, "model endpoint answered 429 Rate limit reached")
    assert isinstance(waited, Wait) and waited.seconds == 5 and "429" in waited.reason
    clock.now += 1  # b's slot is due, but was taken before the 429: b waits for the block to end
    again = governor.admit(b, "m", "1")
    assert isinstance(again, Wait) and again.seconds == 4
    # Another model of the same endpoint has a budget of its own.
    assert isinstance(governor.admit(c, "other", "1"), Go)
    clock.now += 4
    assert isinstance(governor.admit(b, "m", "1"), Go)


def test_a_retried_invocation_takes_no_second_slot(table: object) -> None:
    clock = Clock()
    governor = _governor(table, clock, per_minute=60, burst=1)
    a, b = _run("a"), _run("b")
    assert isinstance(governor.admit(a, "m", "1:4"), Go)
    # The same model call again (the invocation died after taking its slot): the same slot.
    assert isinstance(governor.admit(a, "m", "1:4"), Go)
    # b is next, one interval on: a took one slot, not two.
    assert governor.admit(b, "m", "1:2") == Wait(1, "its turn in the model's rate limit")
    assert _slot_at(table, "b") == int(T0 * 1000) + 1000


def test_a_wait_past_the_deadline_ends_the_run_instead(table: object) -> None:
    clock = Clock()
    governor = _governor(table, clock, per_minute=60, burst=1)
    assert isinstance(governor.rate_limited(_run("a"), "m", 30.0, "429"), Wait)
    soon = _run("b", deadline="2027-01-15T08:00:10.000Z", max_duration=20)
    clock.now = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    stop = governor.admit(soon, "m", "1")
    assert stop == Stop("the model's rate limit would make the run wait 30 s, past its max_duration of 20 s")


def test_the_waits_of_a_run_are_bounded_in_all_and_counted_per_execution(table: object) -> None:
    clock = Clock()
    governor = _governor(table, clock, per_minute=60, burst=1, max_wait_seconds=10)
    run = _run("a")
    assert isinstance(governor.rate_limited(run, "m", 4.0, "429"), Wait)
    assert isinstance(governor.rate_limited(run, "m", 4.0, "429"), Wait)
    assert governor.waits(run) == 2
    stop = governor.rate_limited(run, "m", 4.0, "429 Rate limit")
    assert isinstance(stop, Stop)
    assert stop.reason == (
        "the model's rate limit would make the run wait 4 s more, past the 10 s it may wait in all "
        "(TOOLPIPE_MODEL_RATE_MAX_WAIT) (429 Rate limit)"
    )
    # A fresh execution of the run counts its own waits (its own history-event budget).
    assert governor.waits(run.model_copy(update={"execution": 2})) == 0


def test_a_transaction_conflict_with_another_run_is_a_lost_race(table: object) -> None:
    # On AWS two runs taking a slot of one budget at once: DynamoDB cancels one transaction with
    # TransactionConflict (moto never does). Refused, not applied: the run reads again and takes its slot.
    clock = Clock()
    governor = _governor(table, clock, per_minute=60, burst=1)
    client = table.meta.client  # type: ignore[attr-defined]
    with refused(client, "TransactWriteItems", cancellation_body("TransactionConflict", "None")) as seen:
        assert isinstance(governor.admit(_run("a"), "m", "1"), Go)
    assert len(seen) == 1
    assert governor.admit(_run("b"), "m", "1") == Wait(1, "its turn in the model's rate limit")


def test_a_transaction_cancelled_for_another_reason_is_raised(table: object) -> None:
    clock = Clock()
    governor = _governor(table, clock, per_minute=60, burst=1)
    client = table.meta.client  # type: ignore[attr-defined]
    throttled = cancellation_body("ThrottlingError", "TransactionConflict")
    with refused(client, "TransactWriteItems", throttled), pytest.raises(ClientError):
        governor.admit(_run("a"), "m", "1")


def test_an_exclude_run_is_not_ended_at_its_nominal_deadline(table: object) -> None:
    # "exclude": waits for people push the run's limit past its deadline; the timer's check of its
    # active time and the model step's bound it, not the governor's comparison with the deadline.
    clock = Clock()
    governor = _governor(table, clock, per_minute=60, burst=1)
    assert isinstance(governor.admit(_run("a"), "m", "1"), Go)  # the budget is taken
    clock.now = 1_800_000_000.0  # 2027-01-15T08:00:00Z: the deadline passed an hour ago
    late = _run("b", deadline="2027-01-15T07:00:00.000Z", max_duration=3600, max_duration_waits="exclude")
    assert governor.admit(late, "m", "1") == Wait(1, "its turn in the model's rate limit")
    # Counted waits: the same run ends at its deadline.
    counted = late.model_copy(update={"run_id": "c", "max_duration_waits": "count"})
    assert isinstance(governor.admit(counted, "m", "1"), Stop)


def test_a_child_run_wakes_in_time_to_beat_for_its_parents_call(table: object) -> None:
    # A child's parent waits in a call with a heartbeat timeout (900 s); each model step of the
    # child beats. A longer wait is waited in parts of at most 840 s, each ending in a step.
    clock = Clock()
    settings = RateSettings(table_name=TABLE, per_minute=60, burst=1)
    governor = RateGovernor(
        table, settings, "http://model.example/v1", clock=clock, call_heartbeat_seconds=900
    )  # type: ignore[arg-type]
    parent = ParentCall(run_id="p", call_id="c1", seq=2, turn=0, tool="ask_child")
    child = _run("child", parent=parent)
    waited = governor.rate_limited(child, "m", 2000.0, "429")
    assert isinstance(waited, Wait) and waited.seconds == 840
    clock.now += 840
    assert governor.admit(child, "m", "1") == Wait(840, "its turn in the model's rate limit")
    clock.now += 840
    assert governor.admit(child, "m", "1") == Wait(320, "its turn in the model's rate limit")
    clock.now += 320
    assert isinstance(governor.admit(child, "m", "1"), Go)
    # What it waited is counted once: 2000 s in all, not each part's whole wait.
    assert table.get_item(Key={"pk": "RUN#child"})["Item"]["waited_ms"] == 2_000_000  # type: ignore[attr-defined]
    # A run that is nobody's child waits the whole wait at once.
    assert governor.rate_limited(_run("top"), "m", 2000.0, "429") == Wait(
        2000, "the model endpoint asked to wait (429)"
    )


def test_a_resume_gives_the_run_its_whole_total_wait_again(table: object) -> None:
    clock = Clock()
    governor = _governor(table, clock, per_minute=60, burst=1, max_wait_seconds=10)
    run = _run("a")
    assert isinstance(governor.rate_limited(run, "m", 4.0, "429"), Wait)
    assert isinstance(governor.rate_limited(run, "m", 4.0, "429"), Wait)
    assert isinstance(governor.rate_limited(run, "m", 4.0, "429"), Stop)  # 12 s > 10 s: limit
    # Resumed (a new execution): its waits are counted from 0 again, then bounded as before.
    ended = ResumeRecord(execution=2, turn=0, ended=RunStatus.LIMIT, error="waited", by="me")
    resumed = run.model_copy(update={"execution": 2, "resumes": [ended]})
    assert isinstance(governor.rate_limited(resumed, "m", 4.0, "429"), Wait)
    assert isinstance(governor.rate_limited(resumed, "m", 4.0, "429"), Wait)
    assert isinstance(governor.rate_limited(resumed, "m", 4.0, "429"), Stop)
