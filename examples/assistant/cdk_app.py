"""Your CDK app: `cdk deploy` from this folder deploys your agents on toolpipe's pipeline.

Settings come from CDK context (cdk.json, or `cdk deploy -c NAME=VALUE`): model_name,
model_base_url, model_key_secret_arn, api_auth and the others toolpipe's own stack reads; its
outputs are the same too (ApiUrl, ModelApiKeySecretArn, ...). `TOOLPIPE_BUNDLE=0 cdk synth`
writes the template without building the layers (offline). For resources of your own, build the
app with `toolpipe.cdk.build_app(...)` and add them to its stack, or put a `ToolPipeline`
construct in a stack you write.
"""

from toolpipe.cdk import synth

synth("Assistant", agents="assistant.agents")
