"""Your CDK app: `cdk deploy` from this folder deploys your agents with toolpipe's pipeline.

`TOOLPIPE_BUNDLE=0 cdk synth` writes the template without building the layers (offline).
"""

import os

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from cdk_nag import AwsSolutionsChecks

from toolpipe.cdk import SKIP_BUNDLING, ToolPipeline

app = cdk.App(post_cli_context=SKIP_BUNDLING if os.environ.get("TOOLPIPE_BUNDLE") == "0" else None)
stack = cdk.Stack(app, "Assistant")
agents = ToolPipeline(
    stack,
    "Agents",
    app="assistant.agents",
    model_name=str(app.node.try_get_context("model_name") or "gpt-4o-mini"),
    model_base_url=str(app.node.try_get_context("model_base_url") or ""),
)
# `send_email` (assistant/agents.py) sends from this SES identity, which must be verified in the
# account; the tool worker may send from it and nothing else.
sender = str(app.node.try_get_context("email_sender") or "assistant@example.com")
agents.functions.tool_worker.add_environment("TOOLPIPE_EMAIL_SENDER", sender)
agents.functions.tool_worker.add_to_role_policy(
    iam.PolicyStatement(
        actions=["ses:SendEmail"],
        resources=[stack.format_arn(service="ses", resource="identity", resource_name=sender)],
    )
)
cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
