"""The read side of the timeline page: a run's timeline, and the runs list with what each cost.

Read as `GET /runs/{id}` is: a run is visible to the principal that started it and to the admin
principal; to anyone else it does not exist (the same `RunNotFoundError` as an unknown id).
"""

from itertools import islice
from typing import Protocol

from pydantic import BaseModel, Field

from toolpipe.shared.costs.estimate import estimate
from toolpipe.shared.costs.prices import PriceTable
from toolpipe.shared.deferred.models import Approval
from toolpipe.shared.history import HistoryStore
from toolpipe.shared.messages import RunStatus
from toolpipe.shared.runs.children import child_runs
from toolpipe.shared.runs.report import RUNS_PAGE_DEFAULT, decode_cursor, encode_cursor, readable
from toolpipe.shared.runs.timeline import MAX_TURNS, NAME_CHARS, Timeline, build_timeline, elapsed_ms, visible

# Waits a timeline reads: a call slot has at most one approval; a run this gated is rare.
MAX_WAITS = 1_000


class RunApprovals(Protocol):
    def for_run(self, run_id: str, limit: int) -> list[Approval]:
        """The approvals of the run's calls, at most `limit`."""
        ...


class RunRow(BaseModel):
    """One run in the runs list: what the page's table shows."""

    run_id: str
    agent: str
    status: RunStatus
    created_at: str
    duration_ms: int | None = Field(description="Start to end; null while it runs.")
    cost_usd: float | None = Field(description="The model's cost; null if the record is gone.")
    infra_usd: float | None = Field(
        default=None,
        description="The AWS operations' estimated cost (shared/costs); null if the record is gone.",
    )
    parent_run_id: str | None = None


class RunRows(BaseModel):
    runs: list[RunRow]
    next: str | None


class TimelineReader:
    def __init__(
        self,
        store: HistoryStore,
        approvals: RunApprovals,
        admin_principal: str | None = None,
        prices: PriceTable | None = None,
    ) -> None:
        self._store = store
        self._approvals = approvals
        self._admin = admin_principal
        self._prices = prices or PriceTable()

    def timeline(self, run_id: str, caller: str) -> Timeline:
        """The run's timeline, or `RunNotFoundError` when the caller may not see it."""
        record = readable(self._store, run_id, caller, self._admin)
        history = self._store.load_history(run_id)
        waits = self._approvals.for_run(run_id, MAX_WAITS)
        children = list(islice(child_runs(self._store, record), MAX_TURNS))
        return build_timeline(record, history, waits, children)

    def runs(self, caller: str, token: str | None = None, limit: int = RUNS_PAGE_DEFAULT) -> RunRows:
        """A page of the caller's runs, newest first, each with its duration and cost.

        Raises:
            InvalidCursorError: `token` is not one this listing gave.
        """
        start = decode_cursor(token, caller) if token is not None else None
        summaries, cursor = self._store.list_runs(caller, limit=limit, start=start)
        # The listing's index holds no usage or end (they change every turn): the records do.
        records = self._store.get_runs([s.run_id for s in summaries])
        rows = []
        for summary in summaries:
            record = records.get(summary.run_id)
            ended = record is not None and record.status is not RunStatus.RUNNING
            rows.append(
                RunRow(
                    run_id=summary.run_id,
                    agent=visible(summary.agent, NAME_CHARS),
                    status=record.status if record else summary.status,
                    created_at=summary.created_at,
                    duration_ms=elapsed_ms(record.created_at, record.updated_at)
                    if record and ended
                    else None,
                    cost_usd=record.usage.cost_micro_usd / 1_000_000 if record else None,
                    infra_usd=self._infra_usd(summary.run_id) if record else None,
                    parent_run_id=summary.parent_run_id,
                )
            )
        return RunRows(runs=rows, next=encode_cursor(cursor) if cursor is not None else None)

    def _infra_usd(self, run_id: str) -> float:
        # One small read a row (a page holds 20): the counters priced as
        # GET /runs/{id} prices them.
        return estimate(self._store.get_costs(run_id), self._prices, 0.0).infra_usd
