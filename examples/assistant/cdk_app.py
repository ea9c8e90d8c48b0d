"""The example's CDK app: toolpipe's stack for the assistant (`cdk deploy` from this folder),
plus the "mail" runner's grant for its `send_email` tool.

Settings come from CDK context (cdk.json, or `cdk deploy -c NAME=VALUE`): model_name,
model_base_url, model_key_secret_arn, api_auth and the others toolpipe's own stack reads, and
`email_sender`. `TOOLPIPE_BUNDLE=0 cdk synth` writes the template without building the layers.
"""

from aws_cdk import aws_iam as iam

from toolpipe.cdk import ToolpipeStack, synth


def allow_email(stack: ToolpipeStack) -> None:
    """`send_email` (assistant/agents.py) sends from this SES identity, which must be verified
    in the account. It runs in the "mail" runner (`runners` below), whose role alone may send
    from it: no other tool, in the default runner, can."""
    sender = str(stack.node.try_get_context("email_sender") or "assistant@example.com")
    runner = stack.pipeline.tool_runner("mail")
    runner.add_environment("TOOLPIPE_EMAIL_SENDER", sender)
    runner.add_to_role_policy(
        iam.PolicyStatement(
            actions=["ses:SendEmail"],
            resources=[stack.format_arn(service="ses", resource="identity", resource_name=sender)],
        )
    )


synth("Assistant", agents="assistant.agents", runners=["mail"], extend=allow_email)
