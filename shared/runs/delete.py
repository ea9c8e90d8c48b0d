"""Deleting an ended run now, before its retention runs out (`DELETE /runs/{id}`).

A run goes with its child runs (the runs its agent tools started, theirs, and so on): they hold
what the parent sent them and what they answered, and no one would find them by the parent
afterwards. A child run may also be deleted on its own; its parent keeps the answer it got.
Children go first, the run's own record last: a delete that dies half-way leaves the run there,
still listing what is left of its tree, and the same delete again removes the rest.
"""

from collections.abc import Iterator

from toolpipe.shared.history import HistoryStore
from toolpipe.shared.messages import RunRecord, RunStatus
from toolpipe.shared.runs import children
from toolpipe.shared.runs.errors import RunStillRunningError
from toolpipe.shared.runs.report import readable


class RunDeleter:
    def __init__(self, store: HistoryStore, admin_principal: str | None = None) -> None:
        self._store = store
        self._admin = admin_principal

    def delete(self, run_id: str, caller: str) -> list[str]:
        """Delete the run and its child runs, all ended; the ids deleted, the run's last.

        Raises:
            RunNotFoundError: unknown (or deleted already), or not the caller's.
            RunStillRunningError: it, or a run below it, is running: nothing was deleted.
        """
        run = readable(self._store, run_id, caller, self._admin)
        tree = list(self._tree(run))
        for member in tree:
            if member.status is RunStatus.RUNNING:
                raise RunStillRunningError(run_id, member.run_id)
        for member in tree:
            self._store.delete_run(member.run_id)
        return [member.run_id for member in tree]

    def _tree(self, run: RunRecord) -> Iterator[RunRecord]:
        """The run's descendants, each before its parent, and the run last."""
        for child in children.child_runs(self._store, run):
            yield from self._tree(child)
        yield run
