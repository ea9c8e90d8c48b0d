"""The stack's own EventBridge bus for run events (`shared/runs/events.py`)."""

from aws_cdk import aws_events as events
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from toolpipe.shared.runs.events import SOURCE
from toolpipe.shared.settings import EventSettings

# The variable the functions read the bus from, as `EventSettings` names it.
BUS_VARIABLE = EventSettings.env_names["bus_name"]


class RunEvents(Construct):
    """A bus of the stack's own, so subscribers' rules see only toolpipe's events and the
    functions may put events on it and nowhere else. Subscribe with a rule on `bus` matching
    `{"source": ["toolpipe"]}` (and a `detail-type` to narrow it)."""

    source = SOURCE

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.bus = events.EventBus(
            self,
            "Bus",
            description="toolpipe run events: RunStarted, ToolCallCompleted, RunCompleted, RunFailed",
        )

    def grant_publish(self, *functions: lambda_.Function) -> None:
        """Let each function put events on this bus only (`events:PutEvents` on its ARN), and
        tell it the bus's name; a function without the variable publishes nothing."""
        for function in functions:
            self.bus.grant_put_events_to(function)
            function.add_environment(BUS_VARIABLE, self.bus.event_bus_name)
