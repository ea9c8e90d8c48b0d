"""Starting runs from S3 objects and EventBridge events: what arrives, and the tool that reads
a triggered run's object. The service that starts the runs is `shared/runs/triggers.py`."""

from toolpipe.shared.triggers.events import (
    RunRequested,
    RunRequestedDetail,
    S3ObjectCreated,
    TriggerEventError,
    parse_trigger_event,
)
from toolpipe.shared.triggers.read_input import MAX_READ_BYTES, read_input, with_input_reader

__all__ = [
    "MAX_READ_BYTES",
    "RunRequested",
    "RunRequestedDetail",
    "S3ObjectCreated",
    "TriggerEventError",
    "parse_trigger_event",
    "read_input",
    "with_input_reader",
]
