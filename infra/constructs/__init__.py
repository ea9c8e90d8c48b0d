"""The toolpipe stack's components, one construct each; `infra.pipeline.ToolPipeline` puts
them together. Each carries its own cdk-nag acknowledgements, reasons beside them."""

from infra.constructs.api import Api, ApiAuth, Throttle
from infra.constructs.events import RunEvents
from infra.constructs.functions import Functions
from infra.constructs.nag import acknowledge
from infra.constructs.run_flow import RunFlow
from infra.constructs.storage import Storage
from infra.constructs.tool_queue import ToolQueue

__all__ = [
    "Api",
    "ApiAuth",
    "Functions",
    "RunEvents",
    "RunFlow",
    "Storage",
    "Throttle",
    "ToolQueue",
    "acknowledge",
]
