"""CDK entry point (`cdk synth`, `cdk deploy`). Context: `model_base_url`, `model_name`.

`TOOLPIPE_BUNDLE=0` synthesizes the template without building the layers (no pip, no
network): for checks and tests only, and the assembly carries a warning saying so.
"""

import os
import sys
from typing import Any

from aws_cdk import Annotations, App, Validations
from cdk_nag import AwsSolutionsChecks

from toolpipe.infra.stack import ToolpipeStack

SKIP_BUNDLING: dict[str, Any] = {"aws:cdk:bundling-stacks": []}


def build_app(
    *, bundle: bool = True, outdir: str | None = None, context: dict[str, object] | None = None
) -> tuple[App, ToolpipeStack]:
    # post_cli_context: the CLI refuses user context keys under aws:, and this must win over it.
    app = App(outdir=outdir, context=context, post_cli_context=None if bundle else SKIP_BUNDLING)
    stack = ToolpipeStack(
        app,
        "Toolpipe",
        model_base_url=str(app.node.try_get_context("model_base_url") or ""),
        model_name=str(app.node.try_get_context("model_name") or "gpt-4o-mini"),
        description="toolpipe: durable LLM tool calling",
    )
    if not bundle:
        Annotations.of(stack).add_warning_v2(
            "toolpipe:NoBundling",
            "TOOLPIPE_BUNDLE=0: the layers were not built; do not deploy this assembly.",
        )
    # Findings fail the synth; each construct acknowledges its own, with the reason (infra/constructs/).
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack


def main() -> None:
    try:
        app, _ = build_app(bundle=os.environ.get("TOOLPIPE_BUNDLE", "1") != "0")
    except ValueError as e:
        # A bad context value (`-c api_auth=...`): one line naming it, not a traceback.
        sys.exit(f"toolpipe: {e}")
    app.synth()


if __name__ == "__main__":
    main()
