"""One governor for the model's rate limit: a budget per endpoint and model, shared by every run.

Why: each run used to meet the endpoint's rate limit alone. A 429 was retried inside the
orchestrator's Lambda, billed while it slept, and a burst of runs all retried at once. Here the
runs of one endpoint and model share one budget, and a run that must wait does so in the state
machine (a Wait state, `DecisionStatus.WAIT`), with no Lambda running.

The budget is GCRA (the generic cell rate algorithm, as in ATM networks and Redis' `redis-cell`):
one number per endpoint and model, the theoretical arrival time (TAT), in one DynamoDB item.
A call may go at `max(now, TAT - tolerance)`; taking it moves TAT to `max(now, TAT) + interval`
with one conditional write (a rival's write, or a rival's transaction on the budget at the same
time, makes it read again). A run whose slot is in the future keeps it (a reservation, keyed by
the model call it is for) and waits until then: runs are served in the order they asked, and
nobody wakes to find the slot taken.

A 429, or an answer that names a wait (`Retry-After`, `retry-after-ms`), tells every run of the
same endpoint and model: the budget is blocked until then (reservations made before the block
are dropped and taken again), and the run that got it waits that long.

Bounded: a wait that would pass the run's deadline (`max_duration`; an "exclude" run's active
time is bounded by the timer and the model step instead), or bring the run's waits past
`max_wait_seconds` in all (since its last resume), ends the run `limit` with the reason instead. Each wait loop writes
history events (`EVENTS_PER_RATE_WAIT`): the waits of the run's current execution count
in its event budget (shared/runs/executions.py).

Idempotent under at-least-once: the reservation and the budget's new TAT are one transaction,
keyed by the model call (turn and last history slot), so an invocation retried after taking a
slot finds it and takes no other; a reply stored before a crash is found by the step before it
ever asks (shared/runs/model_step.py).
"""

import hashlib
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from toolpipe.shared.dynamo import CONDITION_FALSE, cancellation_codes, lost_race
from toolpipe.shared.messages import RunRecord
from toolpipe.shared.model.errors import ModelCallError
from toolpipe.shared.settings import CallTimeouts, RateSettings

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

BUDGET_PREFIX = "BUDGET#"
RUN_PREFIX = "RUN#"
# The table's time-to-live attribute.
EXPIRES = "expires_at"
# Kept a day past their last use: the table's time to live deletes idle budgets and old runs.
KEEP_SECONDS = 86_400
# The wait after a 429 that names none (a second, or the budget's interval if longer), and the
# least a wait is (a Wait state's shortest loop).
DEFAULT_BACKOFF_MS = 1000
# Rival writes to one budget before this invocation gives up (the state machine retries it).
MAX_RACES = 50
# A child's wait ends this long before its parent's call would miss a heartbeat.
CHILD_WAIT_MARGIN_SECONDS = 60
# A transaction DynamoDB cancelled for another one on the same item at once.
TRANSACTION_CONFLICT = "TransactionConflict"
# The pause before reading a budget again after such a conflict (jittered: the rival's
# transaction finishes meanwhile, and two conflicting runs do not meet again in step).
CONFLICT_PAUSE_SECONDS = (0.005, 0.03)


@dataclass(frozen=True)
class Go:
    """The call may go now."""


@dataclass(frozen=True)
class Wait:
    """The run waits `seconds` in the state machine, then asks again."""

    seconds: int
    reason: str


@dataclass(frozen=True)
class Stop:
    """The wait would pass one of the run's limits: the run ends `limit` with `reason`."""

    reason: str


Admission = Go | Wait | Stop


class RateGovernor:
    """The budgets of one endpoint (`endpoint`, the base URL), one per model, in `table`."""

    def __init__(
        self,
        table: "Table",
        settings: RateSettings,
        endpoint: str,
        clock: Callable[[], float] = time.time,
        call_heartbeat_seconds: int = CallTimeouts().heartbeat_seconds,
    ) -> None:
        """`call_heartbeat_seconds`: the heartbeat timeout of a call (a parent's call of a child
        run included)."""
        self._table = table
        self._endpoint = endpoint
        self._interval_ms = 60_000 / settings.per_minute
        # GCRA's tolerance: `burst` calls may go at once after a quiet spell.
        self._tolerance_ms = self._interval_ms * (settings.burst - 1)
        self._max_wait_ms = settings.max_wait_seconds * 1000
        self._clock = clock
        # A child run's parent waits for it in a call with a heartbeat timeout, and each model
        # step of the child is a beat: a child waits at most this long at a time (a minute under
        # the timeout, for the step's own time), wakes, beats and waits again.
        self._child_wait_ms = max(1, call_heartbeat_seconds - CHILD_WAIT_MARGIN_SECONDS) * 1000

    def waits(self, run: RunRecord) -> int:
        """How many times the run waited in its current execution."""
        mine = self._get(_run_pk(run.run_id))
        return int(mine.get("waits", 0)) if mine.get("execution") == run.execution else 0

    def admit(self, run: RunRecord, model: str, call: str) -> Admission:
        """A slot for the model call `call` of `run` (same `call`, same slot: a retried
        invocation takes no second one)."""
        budget_pk = self._budget_pk(model)
        for _ in range(MAX_RACES):
            now = self._now()
            budget, mine = self._get(budget_pk), self._get(_run_pk(run.run_id))
            blocked = int(budget.get("blocked_until", 0))
            if mine.get("call") == call and int(mine["slot_at"]) >= blocked:
                slot_at = int(mine["slot_at"])
                if slot_at <= now:
                    return Go()
                return self._wait(run, mine, slot_at - now, "its turn in the model's rate limit")
            tat = int(budget["tat"]) if "tat" in budget else None
            slot_at = now if tat is None else max(now, tat - int(self._tolerance_ms))
            # Never early, however close: the endpoint counts as we do. A Wait state waits whole
            # seconds, so a slot a few milliseconds off costs a second's wait, never a 429.
            wait_ms = slot_at - now
            stop = self._past_limits(run, mine, wait_ms)
            if stop is not None:
                return stop
            new_tat = max(now, tat or now) + round(self._interval_ms)
            holding = {"call": call, "slot_at": slot_at}
            waited_ms = self._this_time(run, wait_ms)
            if self._write(budget_pk, tat, {"tat": new_tat}, run, mine, waited_ms, holding):
                if not wait_ms:
                    return Go()
                return Wait(_seconds(waited_ms), "its turn in the model's rate limit")
        raise _contended()

    def rate_limited(self, run: RunRecord, model: str, retry_after: float | None, detail: str) -> Wait | Stop:
        """The endpoint answered 429 or asked to wait: every run of `model` waits until then,
        this one included (its slot is spent)."""
        budget_pk = self._budget_pk(model)
        asked_ms = (
            max(DEFAULT_BACKOFF_MS, round(self._interval_ms))
            if retry_after is None
            else max(DEFAULT_BACKOFF_MS, math.ceil(retry_after * 1000))
        )
        for _ in range(MAX_RACES):
            now = self._now()
            budget, mine = self._get(budget_pk), self._get(_run_pk(run.run_id))
            until = now + asked_ms
            stop = self._past_limits(run, mine, asked_ms)
            if stop is not None:
                return Stop(f"{stop.reason} ({detail})")
            tat = int(budget["tat"]) if "tat" in budget else None
            pushed = {
                "tat": max(tat or 0, until + int(self._tolerance_ms)),
                "blocked_until": max(int(budget.get("blocked_until", 0)), until),
            }
            waited_ms = self._this_time(run, asked_ms)
            if self._write(budget_pk, tat, pushed, run, mine, waited_ms, None):
                return Wait(_seconds(waited_ms), f"the model endpoint asked to wait ({detail})")
        raise _contended()

    # --- one wait, and its bounds -----------------------------------------------------------

    def _wait(self, run: RunRecord, mine: dict[str, Any], wait_ms: int, reason: str) -> Wait | Stop:
        """A wait for a slot already held (the Wait state woke early)."""
        stop = self._past_limits(run, mine, wait_ms)
        if stop is not None:
            return stop
        waited_ms = self._this_time(run, wait_ms)
        self._table.put_item(
            Item=self._run_item(run, mine, waited_ms, {k: mine[k] for k in ("call", "slot_at")})
        )
        return Wait(_seconds(waited_ms), reason)

    def _this_time(self, run: RunRecord, wait_ms: int) -> int:
        """How much of a wait the run waits before its next step: all of it, but a child run
        wakes in time to beat for its parent's call (the wait's end is checked against the
        run's limits whole; what it waited is counted as waited)."""
        return min(wait_ms, self._child_wait_ms) if run.parent is not None else wait_ms

    def _past_limits(self, run: RunRecord, mine: dict[str, Any], wait_ms: int) -> Stop | None:
        if not wait_ms:
            return None
        seconds = _seconds(wait_ms)
        # An "exclude" run's deadline is nominal: its waits for people push its limit on, and
        # only its active time counts (the timer's check and the model step's enforce it).
        if run.deadline is not None and run.max_duration_waits != "exclude":
            deadline_ms = datetime.fromisoformat(run.deadline).timestamp() * 1000
            if self._now() + wait_ms >= deadline_ms:
                return Stop(
                    f"the model's rate limit would make the run wait {seconds} s, past its "
                    f"max_duration of {run.max_duration} s"
                )
        if _waited_ms(run, mine) + wait_ms > self._max_wait_ms:
            return Stop(
                f"the model's rate limit would make the run wait {seconds} s more, past the "
                f"{self._max_wait_ms // 1000} s it may wait in all (TOOLPIPE_MODEL_RATE_MAX_WAIT)"
            )
        return None

    # --- DynamoDB ---------------------------------------------------------------------------

    def _write(
        self,
        budget_pk: str,
        tat: int | None,
        values: dict[str, int],
        run: RunRecord,
        mine: dict[str, Any],
        wait_ms: int,
        holding: dict[str, Any] | None,
    ) -> bool:
        """The budget's new values, if nobody changed its TAT since it was read, and the run's
        record (its slot, its waits) in the same transaction. False: a rival got there first."""
        names = {"#tat": "tat", "#exp": "expires_at", "#endpoint": "endpoint"}
        sets = [f"#{k} = :{k}" for k in values if k != "tat"]
        names.update({f"#{k}": k for k in values if k != "tat"})
        update: dict[str, Any] = {
            "TableName": self._table.name,
            "Key": {"pk": budget_pk},
            "UpdateExpression": "SET "
            + ", ".join(["#tat = :tat", "#exp = :exp", "#endpoint = :endpoint", *sets]),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {
                **{f":{k}": v for k, v in values.items()},
                ":exp": self._expiry(),
                ":endpoint": self._endpoint,
            },
            "ConditionExpression": "attribute_not_exists(#tat)" if tat is None else "#tat = :old",
        }
        if tat is not None:
            update["ExpressionAttributeValues"][":old"] = tat
        item = self._run_item(run, mine, wait_ms, holding)
        client: Any = self._table.meta.client  # plain Python values, as the table resource takes them
        try:
            client.transact_write_items(
                TransactItems=[{"Update": update}, {"Put": {"TableName": self._table.name, "Item": item}}]
            )
        except ClientError as e:
            if lost_race(e):
                return False
            if _conflicted(e):
                # Two runs took a slot of one budget at once: DynamoDB cancelled this transaction,
                # applying none of it. A race like a failed condition: read again, a little later.
                time.sleep(random.uniform(*CONFLICT_PAUSE_SECONDS))
                return False
            raise
        return True

    def _run_item(
        self, run: RunRecord, mine: dict[str, Any], wait_ms: int, holding: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The run's record: the slot it holds (`holding`), its waits in this execution and since it
        was last resumed."""
        same = mine.get("execution") == run.execution
        waits = int(mine.get("waits", 0)) if same else 0
        return {
            "pk": _run_pk(run.run_id),
            "execution": run.execution,
            "waits": waits + (1 if wait_ms else 0),
            "resumes": len(run.resumes),
            # As waited: whole seconds.
            "waited_ms": _waited_ms(run, mine) + (_seconds(wait_ms) * 1000 if wait_ms else 0),
            "expires_at": self._expiry(),
            **(holding or {}),
        }

    def _get(self, pk: str) -> dict[str, Any]:
        return self._table.get_item(Key={"pk": pk}, ConsistentRead=True).get("Item") or {}

    def _budget_pk(self, model: str) -> str:
        # Hashed: a base URL may be longer than a partition key may be.
        digest = hashlib.sha256(f"{self._endpoint}\n{model}".encode()).hexdigest()[:32]
        return f"{BUDGET_PREFIX}{digest}"

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def _expiry(self) -> int:
        return int(self._clock()) + KEEP_SECONDS


def model_call_key(run: RunRecord, last_seq: int) -> str:
    """Which model call of the run a slot is for: its turn, after its last history slot (a repair
    message or a new execution's first step is a call of its own)."""
    return f"{run.execution}:{run.turn}:{last_seq}"


def _contended() -> ModelCallError:
    # This exact class: the state machine retries the model step by its name, later.
    return ModelCallError(f"the model's rate budget changed {MAX_RACES} times in a row")


def _conflicted(error: ClientError) -> bool:
    """A transaction cancelled because another one wrote the same item at the same time (and for
    no reason but that, or a failed condition): it was not applied."""
    codes = set(cancellation_codes(error)) - {"None", CONDITION_FALSE}
    return codes == {TRANSACTION_CONFLICT}


def _waited_ms(run: RunRecord, mine: dict[str, Any]) -> int:
    """What the run waited in all since it was last resumed: a resume gives a run stopped by the
    total-wait cap (`max_wait_seconds`) the whole of it again, as it does the limits it raises."""
    same = int(mine.get("resumes", 0)) == len(run.resumes)
    return int(mine.get("waited_ms", 0)) if same else 0


def _run_pk(run_id: str) -> str:
    return f"{RUN_PREFIX}{run_id}"


def _seconds(wait_ms: int) -> int:
    # Whole seconds (SecondsPath), rounded up: the run never comes back before its slot.
    return max(1, math.ceil(wait_ms / 1000))
