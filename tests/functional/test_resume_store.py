"""What resume and fork write to the run record, on both stores (DynamoDB on moto, memory):
one resume wins a race, raised limits in USD survive DynamoDB, a fork is listed once."""

from collections.abc import Iterator
from typing import Any

import pytest

from tests.reliability.harness import moto_store
from toolpipe.shared.history import MemoryHistoryStore
from toolpipe.shared.messages import RunLimits, RunRecord, RunStatus, UserMessage
from toolpipe.shared.runs.resume import RunResumer


class Starts:
    def __init__(self) -> None:
        self.started: list[tuple[str, int, str | None]] = []

    def start(self, run_id: str, execution: int = 1, deadline: str | None = None) -> None:
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
