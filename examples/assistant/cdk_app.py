"""Your CDK app: `cdk deploy` from this folder deploys your agents with toolpipe's pipeline.

`TOOLPIPE_BUNDLE=0 cdk synth` writes the template without building the layers (offline).
"""

import os

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from toolpipe.cdk import SKIP_BUNDLING, ToolPipeline

app = cdk.App(post_cli_context=SKIP_BUNDLING if os.environ.get("TOOLPIPE_BUNDLE") == "0" else None)
stack = cdk.Stack(app, "Assistant")
ToolPipeline(
    stack,
    "Agents",
    app="assistant.agents",
    model_name=str(app.node.try_get_context("model_name") or "gpt-4o-mini"),
    model_base_url=str(app.node.try_get_context("model_base_url") or ""),
)
cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
