"""The timer's checks of a run whose waits for people do not count, on moto: counted per
execution (its event budget), a run past its active time told so, one that waited not."""

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from tests.reliability.harness import TABLE, moto_store
from toolpipe.shared.deferred.models import Approval, ApprovalStatus
from toolpipe.shared.deferred.store import DynamoApprovalStore
from toolpipe.shared.messages import DeadlineCheckRequest, RunRecord, RunStatus, UserMessage
from toolpipe.shared.runs.active_time import ActiveTime
from toolpipe.shared.runs.time_limit import deadline_after

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _run(store: Any, started: datetime, execution: int = 1) -> RunRecord:
    record = RunRecord(
        run_id="r1",
        agent="tester",
        status=RunStatus.RUNNING,
        max_duration=60,
        deadline=deadline_after(60, started),
        max_duration_waits="exclude",
        execution=execution,
    )
    store.create_run(record, UserMessage(seq=1, turn=0, content="go"))
    return store.get_run("r1")


def _approval(began: datetime, decided: datetime | None) -> Approval:
    return Approval(
        approval_id="a" * 32,
        run_id="r1",
        seq=3,
        message_seq=2,
        turn=1,
        call_id="c0",
        tool="wire_money",
        arguments_sha256="0" * 64,
        arguments_preview="{}",
        requester="me",
        status=ApprovalStatus.PENDING if decided is None else ApprovalStatus.APPROVED,
        created_at=began.isoformat(),
        expires_at=(began + timedelta(days=1)).isoformat(),
        decided_at=None if decided is None else decided.isoformat(),
    )


def _check(timer: ActiveTime, execution: str = "r1") -> Any:
    return timer.check(DeadlineCheckRequest(action="check_deadline", run_id="r1", execution=execution))


def test_checks_count_per_execution_and_a_wait_moves_the_limit() -> None:
    with moto_store() as store:
        table = boto3.resource("dynamodb", region_name="us-east-1").Table(TABLE)
        approvals = DynamoApprovalStore(table)
        # Started 100 s ago; a person took 50 s of it: 50 s active, 10 left.
        run = _run(store, NOW - timedelta(seconds=100))
        approvals.create(_approval(NOW - timedelta(seconds=90), NOW - timedelta(seconds=40)), "token")
        timer = ActiveTime(table, store, approvals, now=lambda: NOW)

        assert _check(timer).model_dump() == {"passed": False, "next": deadline_after(10, NOW)}
        assert _check(timer).passed is False
        assert timer.checks(run) == 2
        assert not timer.passed(run)
        # The run went on in its second execution: its checks are counted from 0 again, and a
        # late check of the first does not count there.
        later = run.model_copy(update={"execution": 2})
        _check(timer, "r1--2")
        _check(timer, "r1")
        assert timer.checks(later) == 1 and timer.checks(run) == 0
        # 20 s on, nobody waiting: 70 s active, past the 60.
        timer_later = ActiveTime(table, store, approvals, now=lambda: NOW + timedelta(seconds=20))
        assert _check(timer_later, "r1--2").model_dump() == {"passed": True, "next": None}
        assert timer_later.passed(later)
