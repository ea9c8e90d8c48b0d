"""Starting runs from S3 objects and EventBridge events: what arrives. The service that starts
the runs is `shared/runs/triggers.py`; the tool that reads a triggered run's object is
`shared/agents/read_input.py`."""

from toolpipe.shared.triggers.events import (
    RunRequested,
    RunRequestedDetail,
    S3ObjectCreated,
    TriggerEventError,
    parse_trigger_event,
)

__all__ = [
    "RunRequested",
    "RunRequestedDetail",
    "S3ObjectCreated",
    "TriggerEventError",
    "parse_trigger_event",
]
