"""The stack's own EventBridge bus for run events (`shared/runs/events.py`)."""

from collections.abc import Sequence

from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from toolpipe.shared.runs.events import DETAIL_TYPES, SOURCE
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

    def grant_publish(self, function: lambda_.Function, detail_types: Sequence[str]) -> None:
        """Let `function` put the run events it publishes on this bus, and no other event: source
        `toolpipe` and one of `detail_types` (`FunctionSpec.publishes`). Tell it the bus's name;
        a function without the variable publishes nothing."""
        known = {model.__name__ for model in DETAIL_TYPES}
        if not detail_types or not set(detail_types) <= known:
            raise ValueError(
                f"grant_publish: {list(detail_types)} are not run events ({', '.join(sorted(known))})"
            )
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["events:PutEvents"],
                resources=[self.bus.event_bus_arn],
                conditions={
                    # Both keys are multivalued in IAM (ArrayOfString): ForAllValues holds when
                    # every value is listed, and over no value at all, which Null refuses.
                    "ForAllValues:StringEquals": {
                        "events:source": [SOURCE],
                        "events:detail-type": sorted(detail_types),
                    },
                    "Null": {"events:source": "false", "events:detail-type": "false"},
                },
            )
        )
        function.add_environment(BUS_VARIABLE, self.bus.event_bus_name)
