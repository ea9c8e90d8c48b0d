"""Per-caller quotas on starting runs: how many a caller may start a minute, and how many of
its runs may be running at once. Over either, `POST /runs` answers 429 with `Retry-After`.

The rule, and why it holds under races:

- A start is counted when, and only when, its run is created: the counters are conditions of
  the same DynamoDB transaction that writes the run (`create_run` with an `Admission`). Two
  starts at the limit cannot both pass (the conditions are checked atomically); a refused start
  writes nothing and counts nothing; a retry with the same Idempotency-Key finds its run and is
  never counted again (a run that exists answers before any quota).
- Starts a minute: one counter per caller and minute (`MINUTE#<minute>`, expired by the table's
  time to live). `Retry-After` is the time left in the minute.
- Running at once: the set of the caller's run ids holding a slot (`RUNNING`). The ending that
  changes a run's status gives its slot back; a set, so an ending delivered twice (or a run
  that never held one) removes nothing more. `Retry-After` is a short fixed wait.
- Nothing leaks a slot for good: when a start finds the slots full, `repair` gives back the
  slots of runs that ended (a crash between the ending and the give-back) and starts again the
  execution of a run whose start was cut short after its run was written (turn 0 past a grace
  period; starting an execution that exists does nothing), so it runs and ends.

Who is counted: the callers of `POST /runs`. Runs a trigger starts (S3, RunRequested) are not
counted and never refused (their rate is the trigger's: an object or an event, retried by its
queue), nor are child runs (their root holds the slot).
"""

import time
from collections.abc import Callable
from datetime import datetime

from toolpipe.shared.history.ports import Admission, RunningSlots
from toolpipe.shared.messages import RunStatus
from toolpipe.shared.runs.ports import ExecutionStarter
from toolpipe.shared.settings import QuotaSettings

WINDOW_SECONDS = 60
# What a start refused for the running quota is told to wait: runs end at their own pace, so a
# short fixed wait, for the caller to poll at.
RUNNING_RETRY_AFTER_SECONDS = 10
# A run still at turn 0 this long after it was written may have lost its execution's start (the
# API function died between the two): above the API's 29 s timeout, with room to spare.
START_GRACE_SECONDS = 120
STARTS_PER_MINUTE = "starts_per_minute"
RUNNING = "running"


class RunQuota:
    """The quotas of one deployment (its `QuotaSettings`), applied to each caller on its own."""

    def __init__(self, settings: QuotaSettings, clock: Callable[[], float] = time.time) -> None:
        self._per_minute = settings.starts_per_minute or None
        self._running = settings.running or None
        self._clock = clock

    @property
    def enabled(self) -> bool:
        return self._per_minute is not None or self._running is not None

    def admission(self, caller: str) -> Admission | None:
        """What a start by `caller` now counts against; None when both quotas are off."""
        if not self.enabled:
            return None
        now = self._clock()
        window = int(now // WINDOW_SECONDS)
        return Admission(
            caller=caller,
            window=window,
            # Kept a minute past its own: the time to live only lets DynamoDB delete it.
            window_expires_at=(window + 2) * WINDOW_SECONDS,
            starts_per_minute=self._per_minute,
            running=self._running,
            retry_after={
                STARTS_PER_MINUTE: max(1, (window + 1) * WINDOW_SECONDS - int(now)),
                RUNNING: RUNNING_RETRY_AFTER_SECONDS,
            },
        )

    def repair(self, slots: RunningSlots, starter: ExecutionStarter, caller: str) -> int:
        """Give back `caller`'s slots held by runs that ended or are gone; start again the
        execution of any run whose start was cut short. Returns how many slots were freed."""
        held = slots.running_slots(caller)
        runs = slots.get_runs(held)
        freed = [
            run_id for run_id in held if run_id not in runs or runs[run_id].status is not RunStatus.RUNNING
        ]
        slots.release_slots(caller, freed)
        now = self._clock()
        for run in runs.values():
            if run.status is RunStatus.RUNNING and run.turn == 0:
                age = now - datetime.fromisoformat(run.created_at).timestamp()
                if age > START_GRACE_SECONDS:
                    starter.start(run.run_id, run.execution, run.deadline, run.max_duration_waits)
        return len(freed)
