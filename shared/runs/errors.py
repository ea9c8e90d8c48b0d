"""Errors of the run services that a caller must act on: a 4xx for a request, a retry for a
delivery."""

from datetime import UTC, datetime

from toolpipe.shared.errors import ConflictError, ToolpipeError


class IdempotencyConflictError(ToolpipeError):
    """An idempotency key already started a run with a different request."""

    def __init__(self, key: str, run_id: str, did: str = "started") -> None:
        super().__init__(f"idempotency key {key!r} already {did} run {run_id} with a different request")
        self.key = key
        self.run_id = run_id
        self.did = did


class RunEndedError(ConflictError):
    """The run already ended, so it cannot be cancelled (a 409)."""

    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(f"run {run_id} already ended ({status}): only a running run can be cancelled")
        self.run_id = run_id
        self.status = status


class RunNotResumableError(ConflictError):
    """Only a run that ended failed or limit can be resumed (a 409)."""

    def __init__(self, run_id: str, why: str) -> None:
        super().__init__(f"run {run_id} cannot be resumed: {why}; only a run that ended failed or limit can")
        self.run_id = run_id


class RunNotForkableError(ConflictError):
    """The turn asked for is past the run's, or not complete (a 409)."""

    def __init__(self, run_id: str, why: str) -> None:
        super().__init__(f"run {run_id} cannot be forked there: {why}")
        self.run_id = run_id


class RunExpiredError(ConflictError):
    """The ended run is past its `retain_until`, so it can be neither resumed nor forked (a 409):
    DynamoDB deletes expired items in no order over a few days, and a run missing some would
    dispatch again the calls whose results are gone."""

    def __init__(self, run_id: str, retain_until: int, action: str) -> None:
        when = datetime.fromtimestamp(retain_until, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        super().__init__(
            f"run {run_id} cannot be {action}: it expired at {when}, so some of its history may "
            "already be gone; start a new run"
        )
        self.run_id = run_id
        self.retain_until = retain_until


class RunStillRunningError(ConflictError):
    """The run (or one of its child runs) is still running, so it cannot be deleted (a 409)."""

    def __init__(self, run_id: str, running: str) -> None:
        which = "it is" if running == run_id else f"its child run {running} is"
        super().__init__(f"run {run_id} cannot be deleted: {which} still running; cancel it first")
        self.run_id = run_id
        self.running = running


class UnknownToolsRequestedError(ToolpipeError):
    """A run request's tool allow-list names tools the agent does not have."""

    def __init__(self, agent: str, names: list[str]) -> None:
        super().__init__(f"agent '{agent}' has no tools named {', '.join(repr(n) for n in names)}")


class CallInProgressError(ToolpipeError):
    """Another delivery of the same tool call holds the claim; retry later (SQS redelivers)."""
