"""Errors of reading and writing runs: a run that is not there, a listing's cursor that this
listing did not give, a start over the caller's quota (counted in the run's own transaction)."""

from toolpipe.shared.errors import NotFoundError, ToolpipeError


class RunNotFoundError(NotFoundError):
    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} not found")
        self.run_id = run_id


class InvalidCursorError(ToolpipeError):
    """A pagination token that this listing did not give (forged, altered, or another caller's)."""

    def __init__(self) -> None:
        super().__init__("next: not a token this listing gave (pass `next` from the previous page as is)")


class QuotaExceededError(ToolpipeError):
    """The caller is over one of its quotas on starting runs (shared/runs/quota.py): a 429,
    to try again after `retry_after` seconds. Nothing was written."""

    def __init__(self, quota: str, limit: int, retry_after: int) -> None:
        what = {"starts_per_minute": "runs started a minute", "running": "runs running at once"}
        super().__init__(
            f"quota exceeded: at most {limit} {what.get(quota, quota)} per caller; "
            f"try again in {retry_after} s"
        )
        self.quota = quota
        self.limit = limit
        self.retry_after = retry_after
