"""A handler, metered: each invocation counts its own request and billed duration and what the
pipeline's clients did in it (`meter.py`), and adds each run's part to that run's counters at
the end. A decorator of its own, so it composes with the handlers' other wrappers (tracing).

The counts of an invocation are written after its work, in one `ADD` per run it worked for: a
write that fails then is logged and the counts are lost (an estimate that runs low), rather
than failing an invocation whose work is done, and which a retry would do again.
"""

import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from toolpipe.shared.costs import meter as meters
from toolpipe.shared.costs.operations import Operations

Handler = TypeVar("Handler", bound=Callable[..., Any])

logger = logging.getLogger(__name__)

# What the counts' own write costs, added to the counts it writes: one request, one write unit
# (the counters' item stays under 1 KB: a test holds it there).
FLUSH = Operations(dynamodb_requests=1, write_units=1)
# An API Gateway request is billed once, to the run it acted on.
API_REQUEST = Operations(api_requests=1)


class CostRecorder(Protocol):
    def add_costs(self, run_id: str, ops: Operations) -> bool:
        """Add `ops` to the run's counters; False (nothing written) when the run is gone."""
        ...


def metered(
    role: str, recorder: Callable[[], CostRecorder], per_request: Operations | None = None
) -> Callable[[Handler], Handler]:
    """Meter every invocation of the handler as the function `role` (`FUNCTION_ROLES`), adding
    its counts to `recorder()`'s store; `per_request`: what each invocation also costs the run
    it worked for (an API Gateway request)."""

    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        def run(event: Any, context: Any) -> Any:
            meter = meters.Meter()
            token = meters.use(meter)
            try:
                return handler(event, context)
            finally:
                meters.release(token)
                first = meter.run_ids()[:1]
                if per_request is not None and first:
                    meter.add_to(first[0], per_request)
                flush(recorder, meter.close(role, memory_of(context)))

        return cast(Handler, run)

    return wrap


def memory_of(context: Any) -> int:
    """The function's memory, as its Lambda context gives it (text on some runtimes)."""
    return int(str(getattr(context, "memory_limit_in_mb", 0) or 0))


def flush(recorder: Callable[[], CostRecorder], by_run: dict[str, Operations]) -> None:
    for run_id, ops in by_run.items():
        try:
            recorder().add_costs(run_id, ops + FLUSH)
        except Exception:
            logger.exception("a run's operations were not counted", extra={"run_id": run_id})
