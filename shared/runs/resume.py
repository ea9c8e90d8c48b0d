"""Resuming a run that ended `failed` or `limit`: the same run goes on from its last stored turn
in a new execution, with the limits the caller raised.

Nothing already done runs again, because a call is its history slot and the ledger keys on it:
the new execution's first model step decides the last stored reply again, dispatching only its
calls that have no result; a worker that finds a call DONE answers from the stored result, and one
that finds it claimed by a delivery that vanished ends it "in doubt" (the model reads that), unless
the tool is idempotent (shared/runs/tool_executor.py). The record lists every resume; the run's
wall-clock limit counts again from the resume (shared/runs/time_limit.py).
"""

import hashlib
from typing import NamedTuple

from toolpipe.shared.history import HistoryStore, retention
from toolpipe.shared.history.errors import QuotaExceededError
from toolpipe.shared.messages import ResumeRecord, RunLimits, RunRecord, RunStatus, utc_now
from toolpipe.shared.runs.errors import IdempotencyConflictError, RunExpiredError, RunNotResumableError
from toolpipe.shared.runs.events import NO_EVENTS, EventPublisher
from toolpipe.shared.runs.ports import ExecutionStarter
from toolpipe.shared.runs.quota import RUNNING, RunQuota
from toolpipe.shared.runs.report import readable
from toolpipe.shared.runs.time_limit import deadline_after

RESUMABLE = (RunStatus.FAILED, RunStatus.LIMIT)


class Resumed(NamedTuple):
    record: RunRecord
    replayed: bool  # True: an earlier resume with the same key did this; nothing new began


def in_resumed_execution(run: RunRecord) -> bool:
    """Whether the run's current execution is its last resume's or a later one (a long run's
    next, a restart's hand-over): its steps see that the expiry the run's ending gave its items
    and objects is taken back (`HistoryStore.keep_resumed`)."""
    return bool(run.resumes) and run.resumes[-1].execution <= run.execution


def resumed_after(run: RunRecord, turn: int) -> bool:
    """Whether the run was resumed (or forked) after `turn` was stored: that turn's ending (a tool
    that failed under `on_tool_error="fail"`) ended the run once and does not end it again."""
    forked_at = run.forked_from.turn if run.forked_from else -1
    return turn <= forked_at or any(r.turn >= turn for r in run.resumes)


def key_hash(caller: str, key: str) -> str:
    """What a resume keeps of its Idempotency-Key: one per caller, as a start's key is."""
    return hashlib.sha256(f"{caller}\n{key}".encode()).hexdigest()


class RunResumer:
    def __init__(
        self,
        store: HistoryStore,
        starter: ExecutionStarter,
        admin_principal: str | None = None,
        *,
        events: EventPublisher = NO_EVENTS,
        quota: RunQuota | None = None,
    ) -> None:
        """`quota`: the per-caller quotas (the API's); a resumed run takes a running slot of its
        caller's, as a started one does."""
        self._store = store
        self._starter = starter
        self._admin = admin_principal
        self._events = events
        self._quota = quota

    def resume(
        self,
        run_id: str,
        caller: str,
        limits: RunLimits | None = None,
        *,
        idempotency_key: str | None = None,
        by: str | None = None,
    ) -> Resumed:
        """Resume the run in a new execution, with `limits` raised.

        Raises:
            RunNotFoundError: unknown, or not the caller's.
            RunNotResumableError: it is running, succeeded or cancelled, or is a child run.
            RunExpiredError: it is past its `retain_until` (its items may be going).
            IdempotencyConflictError: the key resumed it already, with other limits.
            QuotaExceededError: the run's caller has as many runs running as its quota allows.
        """
        run = readable(self._store, run_id, caller, self._admin)
        key = None if idempotency_key is None else key_hash(caller, idempotency_key)
        earlier = next((r for r in run.resumes if key is not None and r.key == key), None)
        if earlier is not None:
            return self._replay(run, earlier, limits, idempotency_key or "")
        if run.status not in RESUMABLE:
            raise RunNotResumableError(run_id, f"it is {run.status.value}")
        if run.parent is not None:
            raise RunNotResumableError(
                run_id, f"it answers a call of run {run.parent.run_id}; resume that run"
            )
        if retention.expired(run.retain_until):
            assert run.retain_until is not None
            raise RunExpiredError(run_id, run.retain_until, "resumed")
        resumed = self._resumed(run, limits, key, by or caller)
        if not self._resume_counted(run, resumed):
            # Another resume (or the same key, sent twice at once) got there first.
            return self.resume(run_id, caller, limits, idempotency_key=idempotency_key, by=by)
        self._events.run_resumed(resumed)
        try:
            self._starter.start(run_id, resumed.execution, resumed.deadline, resumed.max_duration_waits)
        except Exception as e:
            # No execution, so nothing would ever end it: the run must not stay `running`.
            if self._store.finish_run(run_id, RunStatus.FAILED, error=f"the run could not be resumed: {e}"):
                self._events.run_ended(self._store, run_id)
            raise
        return Resumed(self._store.get_run(run_id), replayed=False)

    def _resume_counted(self, run: RunRecord, resumed: RunRecord) -> bool:
        """Write the resume, with a running slot of the run's caller when the quota is on."""
        caller = run.caller or ""
        admission = None if self._quota is None else self._quota.admission(caller)
        try:
            return self._store.resume_run(run, resumed, admission)
        except QuotaExceededError as e:
            # Full: give back what runs that ended still hold, then try once more (as a start).
            if (
                self._quota is None
                or e.quota != RUNNING
                or not self._quota.repair(self._store, self._starter, caller)
            ):
                raise
            return self._store.resume_run(run, resumed, admission)

    @staticmethod
    def _resumed(run: RunRecord, limits: RunLimits | None, key: str | None, by: str) -> RunRecord:
        raised = {**(run.limits.given() if run.limits else {}), **(limits.given() if limits else {})}
        merged = RunLimits.model_validate(raised) if raised else None
        max_duration = (merged.max_duration if merged else None) or run.max_duration
        execution = run.execution + 1
        resume = ResumeRecord(
            execution=execution,
            turn=run.turn,
            ended=run.status,
            error=run.error,
            limits=limits if limits and limits.given() else None,
            by=by,
            key=key,
        )
        return run.model_copy(
            update={
                "status": RunStatus.RUNNING,
                "execution": execution,
                "execution_start_turn": run.turn,
                "limits": merged,
                "max_duration": max_duration,
                "deadline": deadline_after(max_duration),
                "resumes": [*run.resumes, resume],
                "error": None,
                "retain_until": None,
                "updated_at": utc_now(),
            }
        )

    def _replay(self, run: RunRecord, earlier: ResumeRecord, limits: RunLimits | None, key: str) -> Resumed:
        asked = limits.given() if limits else {}
        if asked != (earlier.limits.given() if earlier.limits else {}):
            raise IdempotencyConflictError(key, run.run_id, "resumed")
        if run.status is RunStatus.RUNNING and run.execution == earlier.execution:
            # The first resume may have died between recording it and starting the execution:
            # starting one that exists does nothing, so a retry finishes what it began.
            self._starter.start(run.run_id, earlier.execution, run.deadline, run.max_duration_waits)
        return Resumed(run, replayed=True)
