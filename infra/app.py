"""CDK entry point (`cdk synth`, `cdk deploy`). Context: `model_base_url`, `model_name`."""

from aws_cdk import App, Validations
from cdk_nag import AwsSolutionsChecks

from infra.stack import ToolpipeStack


def build_app(app: App | None = None) -> tuple[App, ToolpipeStack]:
    app = app or App()
    stack = ToolpipeStack(
        app,
        "Toolpipe",
        model_base_url=str(app.node.try_get_context("model_base_url") or ""),
        model_name=str(app.node.try_get_context("model_name") or "gpt-4o-mini"),
        description="toolpipe: durable LLM tool calling",
    )
    # Findings fail the synth; every acknowledgement carries its reason in the stack code.
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack


if __name__ == "__main__":
    build_app()[0].synth()
