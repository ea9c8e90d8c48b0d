from aws_cdk import App, CfnOutput, Stack, Validations
from cdk_nag import AwsSolutionsChecks

from toolpipe.cdk import Throttle, ToolPipeline

app = App()
stack = Stack(app, "MyService")
agents = ToolPipeline(
    stack,
    "Agents",
    app="assistant.agents",  # your module that defines the agents; its package is bundled
    model_name="gpt-4o-mini",
    api_auth="api_key",
    api_throttle=Throttle(rate_per_second=5, burst=10),
)
CfnOutput(stack, "AgentsApiUrl", value=agents.rest_api.url)
Validations.of(app).add_plugins(AwsSolutionsChecks(app))  # findings fail the synth
app.synth()
