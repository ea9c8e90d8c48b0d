"""The per-caller quotas (shared/runs/quota.py) on the memory store: windows, `Retry-After`,
slots given back once, and the repair of slots a crash kept."""

from datetime import UTC, datetime
from typing import Any

import pytest

from toolpipe.shared.history import MemoryHistoryStore
from toolpipe.shared.history.errors import QuotaExceededError
from toolpipe.shared.messages import RunRecord, RunStatus, UserMessage
from toolpipe.shared.runs.quota import RUNNING_RETRY_AFTER_SECONDS, START_GRACE_SECONDS, RunQuota
from toolpipe.shared.settings import QuotaSettings

ALICE = "arn:aws:iam::1:user/alice"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Starter:
    def __init__(self) -> None:
        self.started: list[tuple[str, int]] = []

    def start(
        self, run_id: str, execution: int = 1, deadline: str | None = None, waits: str = "count"
    ) -> None:
        self.started.append((run_id, execution))


def _create(store: MemoryHistoryStore, quota: RunQuota, run_id: str, created_at: str | None = None) -> bool:
    record = RunRecord(
        run_id=run_id,
        agent="a",
        status=RunStatus.RUNNING,
        caller=ALICE,
        **({"created_at": created_at} if created_at else {}),
    )
    return store.create_run(record, UserMessage(seq=1, turn=0, content="hi"), quota.admission(ALICE))


def test_off_counts_nothing() -> None:
    assert RunQuota(QuotaSettings()).admission(ALICE) is None
    assert QuotaSettings.from_env({"TOOLPIPE_QUOTA_RUNNING": "0"}).running == 0


@pytest.mark.parametrize(("now", "wait"), [(600.0, 60), (600.4, 60), (659.0, 1), (659.9, 1), (630.0, 30)])
def test_a_start_over_the_minute_waits_for_the_next_minute(now: float, wait: int) -> None:
    store, clock = MemoryHistoryStore(), Clock(now)
    quota = RunQuota(QuotaSettings(starts_per_minute=1), clock)
    assert _create(store, quota, "r1")
    with pytest.raises(QuotaExceededError) as refused:
        _create(store, quota, "r2")
    assert (refused.value.quota, refused.value.retry_after) == ("starts_per_minute", wait)
    clock.now = (now // 60 + 1) * 60  # the next minute
    assert _create(store, quota, "r2")


def test_a_running_slot_is_given_back_once_and_a_retry_is_never_counted() -> None:
    store = MemoryHistoryStore()
    quota = RunQuota(QuotaSettings(running=1), Clock(0))
    assert _create(store, quota, "r1")
    assert not _create(store, quota, "r1")  # the same run again (an idempotent retry): not refused
    with pytest.raises(QuotaExceededError) as refused:
        _create(store, quota, "r2")
    assert refused.value.retry_after == RUNNING_RETRY_AFTER_SECONDS
    assert "at most 1 runs running at once" in str(refused.value)
    assert store.finish_run("r1", RunStatus.SUCCEEDED)
    assert not store.finish_run("r1", RunStatus.FAILED)  # a duplicate ending
    assert _create(store, quota, "r2")
    with pytest.raises(QuotaExceededError):
        _create(store, quota, "r3")  # the duplicate ending gave nothing more back


def test_repair_frees_the_slots_of_ended_runs_and_restarts_cut_short_ones() -> None:
    clock = Clock(datetime(2026, 1, 1, tzinfo=UTC).timestamp())
    store, starter = MemoryHistoryStore(), Starter()
    quota = RunQuota(QuotaSettings(running=3), clock)
    old = datetime.fromtimestamp(clock.now - START_GRACE_SECONDS - 1, UTC).isoformat()
    recent = datetime.fromtimestamp(clock.now - 5, UTC).isoformat()
    for run_id, created in (("ended", recent), ("orphan", old), ("young", recent)):
        assert _create(store, quota, run_id, created)
    # An ending whose give-back was lost (a crash between the two writes).
    run: Any = store.runs["ended"]
    store.runs["ended"] = run.model_copy(update={"status": RunStatus.FAILED})
    assert quota.repair(store, starter, ALICE) == 1
    assert store.running_slots(ALICE) == ["orphan", "young"]
    assert starter.started == [("orphan", 1)]  # started late; the young one is left to start
