"""The toolpipe stack's components, one construct each; `infra.pipeline.ToolPipeline` puts
them together. Each carries its own cdk-nag acknowledgements, reasons beside them."""

from toolpipe.infra.constructs.alarms import Alarms
from toolpipe.infra.constructs.api import Api, ApiAuth, Throttle
from toolpipe.infra.constructs.events import RunEvents
from toolpipe.infra.constructs.functions import Functions, ReservedConcurrency
from toolpipe.infra.constructs.nag import acknowledge
from toolpipe.infra.constructs.run_flow import RunFlow
from toolpipe.infra.constructs.storage import Storage
from toolpipe.infra.constructs.tool_queue import ToolQueue

__all__ = [
    "Alarms",
    "Api",
    "ApiAuth",
    "Functions",
    "ReservedConcurrency",
    "RunEvents",
    "RunFlow",
    "Storage",
    "Throttle",
    "ToolQueue",
    "acknowledge",
]
