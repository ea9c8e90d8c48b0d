"""A run's active time, for a `max_duration` that does not count waits for people
(`max_duration_waits="exclude"`, shared/runs/time_limit.py).

Active time = the time since the clock started (the deadline less `max_duration`) less the time
some call of the run waited for a person or a program: the union of its approvals' waits, from
when each was requested to when it was decided (or expired), an ongoing one up to now. Read
from the recorded timestamps, never from a Lambda's clock while it runs.

The state machine's timer still enforces it (infra/cdk/definition.py): at the deadline it asks
here (`check`); past the limit, the run ends `limit` as with waits counted; otherwise the timer
waits until the limit would pass if the run waited no more, and asks again. While a wait goes on
the run's active time stands still, so the timer looks again only every 5 minutes or a quarter
of the wait so far, whichever is longer (shared/runs/deadline_checks.py). After a person
answers, the timer may so notice the limit that much later; the model step that follows the
wait checks it too (`passed`), so a run past its limit starts no further turn.

Each check writes history events: the checks of the run's current execution are counted
(`checks`), and those one more turn may take are counted in advance, in its event budget
(shared/runs/executions.py).
"""

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from toolpipe.shared.deferred.models import Approval
from toolpipe.shared.deferred.ports import ApprovalRecords
from toolpipe.shared.dynamo import DEADLINE_CHECKS_SK, lost_race, run_pk
from toolpipe.shared.history.ports import RunRecords
from toolpipe.shared.messages import DeadlineCheck, DeadlineCheckRequest, RunRecord, RunStatus
from toolpipe.shared.runs.deadline_checks import FLOOR_SECONDS, MIN_SECONDS, WAIT_FRACTION
from toolpipe.shared.runs.executions import execution_number
from toolpipe.shared.runs.time_limit import deadline_after

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

# The counter item's attributes (names, not words DynamoDB reserves).
_NAMES = {"#e": "execution", "#c": "checks"}
# A run's approvals read per check: all of them, up to a bound no run reaches.
MAX_WAITS = 100_000


@dataclass(frozen=True)
class Wait:
    """One call's wait: from when it was requested to when it ended (or will end, at the latest)."""

    began: datetime
    ended: datetime


def waits_of(approvals: Iterable[Approval]) -> list[Wait]:
    """The waits recorded on a run's approvals: each ends when it was decided or answered, an
    undecided one when it expires (its task stops waiting then, whenever the record says so)."""
    found = []
    for approval in approvals:
        ends = _time(approval.expires_at)
        if approval.decided_at is not None:
            ends = min(ends, _time(approval.decided_at))
        found.append(Wait(_time(approval.created_at), ends))
    return found


@dataclass(frozen=True)
class Clock:
    """The run's active seconds at `now`, how many of them are left, and the wait going on."""

    active: float
    left: float
    waiting_since: datetime | None


def clock(start: datetime, limit: int, now: datetime, waits: Iterable[Wait]) -> Clock:
    """The active time from `start` to `now`: the time no wait covered (overlapping waits
    count once)."""
    spans = sorted((max(w.began, start), min(w.ended, now)) for w in waits)
    waited, stretch_began, stretch_ended = 0.0, None, None
    for began, ended in spans:
        if began >= ended:
            continue
        if stretch_ended is None or began > stretch_ended:
            if stretch_began is not None and stretch_ended is not None:
                waited += (stretch_ended - stretch_began).total_seconds()
            stretch_began, stretch_ended = began, ended
        else:
            stretch_ended = max(stretch_ended, ended)
    if stretch_began is not None and stretch_ended is not None:
        waited += (stretch_ended - stretch_began).total_seconds()
    ongoing = stretch_began if stretch_ended is not None and stretch_ended >= now else None
    active = max(0.0, (now - start).total_seconds() - waited)
    return Clock(active, limit - active, ongoing)


def next_check(state: Clock, now: datetime) -> datetime:
    """When the timer looks again: when the limit would pass if nothing waited from now; while a
    wait goes on (the clock stands still), at the floor or a part of the wait so far."""
    seconds = max(state.left, MIN_SECONDS)
    if state.waiting_since is not None:
        waited = (now - state.waiting_since).total_seconds()
        seconds = max(seconds, FLOOR_SECONDS, waited * WAIT_FRACTION)
    return now + timedelta(seconds=math.ceil(seconds))


class ActiveTime:
    """The timer's checks of a run whose waits do not count, and the model step's."""

    def __init__(
        self,
        table: "Table",
        runs: RunRecords,
        approvals: ApprovalRecords,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._table = table
        self._runs = runs
        self._approvals = approvals
        self._now = now

    def check(self, request: DeadlineCheckRequest) -> DeadlineCheck:
        """The timer's question: past the limit, or when to look again. Counted first, so a
        check that fails after it still counts in the execution's event budget."""
        run = self._runs.get_run(request.run_id)
        now = self._now()
        if run.status is not RunStatus.RUNNING:
            # Its loop ended it, and ends this execution's timer too: nothing to decide.
            return DeadlineCheck(passed=False, next=deadline_after(FLOOR_SECONDS, now))
        self._count(run.run_id, execution_number(request.execution))
        state = self._clock(run, now)
        if state is None or state.left <= 0:
            return DeadlineCheck(passed=True)
        return DeadlineCheck(passed=False, next=deadline_after(0, next_check(state, now)))

    def passed(self, run: RunRecord) -> bool:
        """Whether the run's active time passed its limit (the model step asks before each turn)."""
        if run.max_duration_waits != "exclude":
            return False  # the timer ends it at its deadline, to the second
        state = self._clock(run, self._now())
        return state is not None and state.left <= 0

    def checks(self, run: RunRecord) -> int:
        """The timer's checks in the run's current execution."""
        if run.max_duration_waits != "exclude" or run.deadline is None:
            return 0
        item = self._table.get_item(
            Key={"pk": run_pk(run.run_id), "sk": DEADLINE_CHECKS_SK}, ConsistentRead=True
        ).get("Item")
        if item is None or int(str(item.get("execution", 0))) != run.execution:
            return 0
        return int(str(item.get("checks", 0)))

    def _clock(self, run: RunRecord, now: datetime) -> Clock | None:
        if run.deadline is None or run.max_duration is None:
            return None
        start = _time(run.deadline) - timedelta(seconds=run.max_duration)
        waits = waits_of(self._approvals.for_run(run.run_id, MAX_WAITS))
        return clock(start, run.max_duration, now, waits)

    def _count(self, run_id: str, execution: int) -> None:
        key = {"pk": run_pk(run_id), "sk": DEADLINE_CHECKS_SK}
        try:
            # The same execution's count goes up; an earlier execution's starts again.
            self._table.update_item(
                Key=key,
                UpdateExpression="SET #e = :n ADD #c :one",
                ConditionExpression="attribute_not_exists(pk) OR #e = :n",
                ExpressionAttributeNames=_NAMES,
                ExpressionAttributeValues={":n": execution, ":one": 1},
            )
        except ClientError as e:
            if not lost_race(e):
                raise
            try:
                self._table.update_item(
                    Key=key,
                    UpdateExpression="SET #e = :n, #c = :one",
                    ConditionExpression="#e < :n",
                    ExpressionAttributeNames=_NAMES,
                    ExpressionAttributeValues={":n": execution, ":one": 1},
                )
            except ClientError as late:
                # A later execution counts already: this one's timer is ending with it.
                if not lost_race(late):
                    raise


def _time(text: str) -> datetime:
    at = datetime.fromisoformat(text)
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
