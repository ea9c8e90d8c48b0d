"""What resume and fork write to the run record, on both stores (DynamoDB on moto, memory):
one resume wins a race, raised limits in USD survive DynamoDB, a fork is listed once."""

from collections.abc import Iterator
from typing import Any

import pytest

from tests.reliability.harness import moto_store
from toolpipe.shared.history import MemoryHistoryStore
from toolpipe.shared.history.errors import QuotaExceededError
from toolpipe.shared.history.retention import RETAIN_UNTIL
from toolpipe.shared.history.run_records import STAMPS_HELD
from toolpipe.shared.messages import RunLimits, RunRecord, RunStatus, UserMessage
from toolpipe.shared.runs.resume import RunResumer


class Starts:
    def __init__(self) -> None:
        self.started: list[tuple[str, int, str | None]] = []

    def start(
        self, run_id: str, execution: int = 1, deadline: str | None = None, waits: str = "count"
    ) -> None:
        self.started.append((run_id, execution, deadline))


@pytest.fixture(params=["dynamodb", "memory"])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryHistoryStore()
        return
    with moto_store() as dynamo:
        yield dynamo


def _ended(store: Any, status: RunStatus = RunStatus.LIMIT) -> RunRecord:
    record = RunRecord(run_id="r1", agent="tester", status=RunStatus.RUNNING, caller="me", max_duration=60)
    assert store.create_run(record, UserMessage(seq=1, turn=0, content="go"))
    assert store.finish_run("r1", status, error="the agent's max_cost_usd")
    return store.get_run("r1")


def test_a_resume_raises_limits_and_the_record_keeps_them(store: Any) -> None:
    run = _ended(store)
    starts = Starts()
    limits = RunLimits(max_cost_usd=2.5, max_tool_calls=80)
    resumed, replayed = RunResumer(store, starts).resume("r1", "me", limits, idempotency_key="k")

    read = store.get_run("r1")
    assert not replayed and read == resumed
    assert (read.status, read.execution, read.error, read.retain_until) == (RunStatus.RUNNING, 2, None, None)
    assert read.limits == limits and read.limits.max_cost_usd == 2.5
    (resume,) = read.resumes
    assert (resume.execution, resume.ended, resume.error, resume.by) == (2, RunStatus.LIMIT, run.error, "me")
    assert starts.started == [("r1", 2, read.deadline)] and read.deadline is not None


def test_a_repeated_resume_after_a_later_one_starts_nothing_and_answers_the_run_as_it_is(store: Any) -> None:
    """A key's retry after the run was resumed again with another key (it ended once more between
    them): nothing starts, and the answer is the run now, in its third execution."""
    _ended(store)
    starts = Starts()
    resumer = RunResumer(store, starts)
    limits = RunLimits(max_iterations=2)
    first, replayed = resumer.resume("r1", "me", limits, idempotency_key="k1")
    assert not replayed and first.execution == 2
    assert store.finish_run("r1", RunStatus.FAILED, error="the tool failed")
    second, replayed = resumer.resume("r1", "me", None, idempotency_key="k2")
    assert not replayed and second.execution == 3

    again, replayed = resumer.resume("r1", "me", limits, idempotency_key="k1")

    assert replayed and again == store.get_run("r1") and again.execution == 3
    assert [execution for _, execution, _ in starts.started] == [2, 3]
    assert len(store.get_run("r1").resumes) == 2


def test_of_two_resumes_of_the_same_ending_one_is_written(store: Any) -> None:
    run = _ended(store)
    first = RunResumer(store, Starts())._resumed(run, None, None, "me")
    second = RunResumer(store, Starts())._resumed(run, RunLimits(max_iterations=9), None, "you")
    assert store.resume_run(run, first)
    assert not store.resume_run(run, second)
    assert store.get_run("r1").resumes[0].by == "me"


def test_a_fork_is_listed_once(store: Any) -> None:
    _ended(store)
    store.add_fork("r1", "f1")
    store.add_fork("r1", "f1")
    store.add_fork("r1", "f2")
    assert sorted(store.get_run("r1").forks) == ["f1", "f2"]


def _quota(running: int) -> Any:
    from toolpipe.shared.runs.quota import RunQuota
    from toolpipe.shared.settings import QuotaSettings

    return RunQuota(QuotaSettings(starts_per_minute=1, running=running))


def test_a_resumed_run_takes_a_running_slot_and_its_ending_gives_it_back(store: Any) -> None:
    # One slot, held by another run of the same caller: the resume is refused, nothing written.
    _ended(store)
    other = RunRecord(run_id="r2", agent="tester", status=RunStatus.RUNNING, caller="me")
    assert store.create_run(other, UserMessage(seq=1, turn=0, content="go"), _quota(1).admission("me"))
    assert store.running_slots("me") == ["r2"]
    resumer = RunResumer(store, Starts(), quota=_quota(1))
    with pytest.raises(QuotaExceededError) as refused:
        resumer.resume("r1", "me")
    assert refused.value.quota == "running"
    assert store.get_run("r1").status is RunStatus.LIMIT and store.running_slots("me") == ["r2"]

    # The other run ends: the resume takes its slot (the minute's one start is not counted
    # again: a resume is not a start), and gives it back when it ends.
    assert store.finish_run("r2", RunStatus.SUCCEEDED)
    resumed, _ = resumer.resume("r1", "me")
    assert resumed.status is RunStatus.RUNNING and store.running_slots("me") == ["r1"]
    assert store.finish_run("r1", RunStatus.FAILED, error="again")
    assert store.running_slots("me") == []


def test_a_give_back_late_for_an_ending_leaves_the_slot_of_a_run_resumed_meanwhile(store: Any) -> None:
    """An ending stamps the run's items, then gives its slot back: a resume in between takes
    the slot again, and the late give-back must not take it from the running run."""
    run = _ended(store)
    resumer = RunResumer(store, Starts(), quota=_quota(1))
    resumed, _ = resumer.resume("r1", "me")
    assert resumed.status is RunStatus.RUNNING and store.running_slots("me") == ["r1"]
    store.release_slots("me", ["r1"])  # the first ending's give-back, arriving late
    assert store.running_slots("me") == ["r1"]
    assert run.status is RunStatus.LIMIT
    # Once it ends again, its slot goes back, and a run that is gone gives back its slot too.
    assert store.finish_run("r1", RunStatus.SUCCEEDED)
    assert store.running_slots("me") == []


def test_a_resumes_execution_takes_back_the_endings_expiry_once() -> None:
    """The resume marks its record; only a step of its own execution takes the ending's stamps
    back (whatever turn the run is at), then the mark goes; an ending since keeps its own."""
    with moto_store() as store:
        _ended(store)

        def stamps() -> dict[str, Any]:
            items = store._table.query(
                KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": "RUN#r1"}
            )["Items"]
            return {item["sk"]: item.get(RETAIN_UNTIL) for item in items}

        until = stamps()["META"]
        assert until is not None and set(stamps().values()) == {until}
        RunResumer(store, Starts()).resume("r1", "me")
        assert stamps()["META"] is None and stamps()["MSG#000001"] == until
        store.keep_resumed("r1", 1)  # a step of the execution before the resume: nothing
        assert stamps()["MSG#000001"] == until
        store.keep_resumed("r1", 2)
        assert set(stamps().values()) == {None}
        assert STAMPS_HELD not in store._table.get_item(Key={"pk": "RUN#r1", "sk": "META"})["Item"]

        assert store.finish_run("r1", RunStatus.FAILED, error="again")
        again = stamps()["META"]
        RunResumer(store, Starts()).resume("r1", "me")
        assert store.finish_run("r1", RunStatus.FAILED, error="ended before its first step")
        last = stamps()["META"]
        store.keep_resumed("r1", 3)  # the resume's step, late: the ending since keeps its stamps
        assert set(stamps().values()) == {last} and last >= again
