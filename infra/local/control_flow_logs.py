"""moto's interpreter logs every state failure at ERROR, with the whole program in the message.
Two of ours are control flow, not errors: every run's loop branch ends with a Fail state
(`RunEnded`: a Parallel ends only when all its branches have, and the deadline's timer must
stop), and a run's deadline ends its timer's branch with `MaxDurationReached`, which the
Parallel's Catch turns into the run's `limit` (infra/cdk/definition.py). AWS records both in the
execution's history and logs nothing; locally, moto's records of them would fill the log file
with an error a run. This filter drops those records, and only those.
"""

import logging
from collections.abc import Callable

from toolpipe.infra.cdk.definition import MAX_DURATION_REACHED, RUN_ENDED

# The logger moto's interpreter reports failures on (moto 5.2.x).
MOTO_LOGGER = "moto.stepfunctions.parser.asl.component.eval_component"
_MARKS = tuple(f"Error={name}," for name in (RUN_ENDED, MAX_DURATION_REACHED))


class _ControlFlow(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(mark in message for mark in _MARKS)


def install() -> Callable[[], None]:
    """Drop moto's records of the definition's control-flow failures; returns the undo."""
    logger, control_flow = logging.getLogger(MOTO_LOGGER), _ControlFlow()
    logger.addFilter(control_flow)
    return lambda: logger.removeFilter(control_flow)
