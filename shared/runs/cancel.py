"""Cancelling a run: mark it `cancelled`, stop its execution, and do the same for its child runs.

The mark comes first and is conditional (only a `running` run is cancelled), so every later
writer keeps it: `finish_run` changes only running runs, the execution-ended rule sees the
stopped execution ABORTED and finds the run ended, a model step still running for it finds it
ended at its next read, a worker still holding a call stores the result but starts nothing
more, and a child run started after the mark is cancelled by the worker that starts it.
"""

from typing import NamedTuple

from toolpipe.shared.history import HistoryStore
from toolpipe.shared.messages import RunRecord, RunStatus
from toolpipe.shared.runs import children
from toolpipe.shared.runs.errors import RunEndedError
from toolpipe.shared.runs.events import NO_EVENTS, EventPublisher
from toolpipe.shared.runs.ports import ExecutionStopper
from toolpipe.shared.runs.report import readable


class Cancelled(NamedTuple):
    record: RunRecord
    replayed: bool  # True: the run was cancelled already; nothing new was done to it


class RunCanceller:
    def __init__(
        self,
        store: HistoryStore,
        stopper: ExecutionStopper,
        admin_principal: str | None = None,
        *,
        events: EventPublisher = NO_EVENTS,
    ) -> None:
        self._store = store
        self._stopper = stopper
        self._admin = admin_principal
        self._events = events

    def cancel(self, run_id: str, caller: str, *, by: str | None = None) -> Cancelled:
        """Cancel a running run and its child runs. A cancelled run is answered as it is (and
        its executions stopped again, in case a first cancel died half-way). The run's error
        names who cancelled it: `by` (a role's session, where the caller is the role), else the
        caller.

        Raises:
            RunNotFoundError: unknown, or not the caller's.
            RunEndedError: it ended otherwise (succeeded, failed, limit).
        """
        run = readable(self._store, run_id, caller, self._admin)
        if run.status is RunStatus.RUNNING and self._store.finish_run(
            run_id, RunStatus.CANCELLED, error=f"cancelled by {by or caller}"
        ):
            replayed = False
            self._events.run_ended(self._store, run_id)  # RunCancelled, once: this write ended it
        else:
            run = self._store.get_run(run_id)  # it ended meanwhile: how?
            if run.status is not RunStatus.CANCELLED:
                raise RunEndedError(run_id, run.status.value)
            replayed = True
        self._stop_tree(self._store.get_run(run_id))
        return Cancelled(self._store.get_run(run_id), replayed)

    def _stop_tree(self, run: RunRecord) -> None:
        self._stopper.stop(run.run_id, run.execution, f"run {run.run_id} cancelled")
        for child in children.child_runs(self._store, run):
            if child.status is RunStatus.RUNNING:
                if self._store.finish_run(child.run_id, RunStatus.CANCELLED, error=children.PARENT_CANCELLED):
                    self._events.run_ended(self._store, child.run_id)
                child = self._store.get_run(child.run_id)
            if child.status is RunStatus.CANCELLED:
                self._stop_tree(child)
