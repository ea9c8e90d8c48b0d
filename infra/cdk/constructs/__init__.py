"""The toolpipe stack's components, one construct each; `infra.cdk.pipeline.ToolPipeline` puts
them together. Each carries its own cdk-nag acknowledgements, reasons beside them."""

from toolpipe.infra.cdk.constructs.alarms import Alarms
from toolpipe.infra.cdk.constructs.api import Api, ApiAuth, Throttle
from toolpipe.infra.cdk.constructs.events import RunEvents
from toolpipe.infra.cdk.constructs.functions import Functions, ReservedConcurrency
from toolpipe.infra.cdk.constructs.nag import acknowledge
from toolpipe.infra.cdk.constructs.run_flow import RunFlow
from toolpipe.infra.cdk.constructs.storage import Storage
from toolpipe.infra.cdk.constructs.tool_queue import ToolQueue

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
