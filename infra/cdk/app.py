"""CDK entry point (`cdk synth`, `cdk deploy`): this repository's, and a project's of your own
(`toolpipe init` writes a `cdk_app.py` calling `synth`). Context: `model_base_url`,
`model_name`, and the keys `infra/cdk/stack.py` reads.

`TOOLPIPE_BUNDLE=0` synthesizes the template without building the layers (no pip, no
network): for checks and tests only, and the assembly carries a warning saying so.
"""

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from aws_cdk import Annotations, App, Validations
from cdk_nag import AwsSolutionsChecks

from toolpipe.infra.cdk import aws_limits
from toolpipe.infra.cdk.feature_flags import FEATURE_FLAGS
from toolpipe.infra.cdk.stack import ToolpipeStack
from toolpipe.shared.errors import ConfigurationError

SKIP_BUNDLING: dict[str, Any] = {"aws:cdk:bundling-stacks": []}


def build_app(
    *,
    bundle: bool = True,
    outdir: str | None = None,
    context: dict[str, object] | None = None,
    stack_name: str = "Toolpipe",
    agents: str | None = None,
    packages: Sequence[str] = (),
    requirements: Sequence[str] = (),
    requirements_lock: str | os.PathLike[str] | None = None,
    runners: Sequence[str] | None = None,
    extend: Callable[[ToolpipeStack], None] | None = None,
) -> tuple[App, ToolpipeStack]:
    """The CDK app and its one stack. `agents`: your app module (default: `[tool.toolpipe]
    app` of the nearest pyproject.toml); `packages`, `requirements_lock`, `runners`: as for
    `ToolPipeline` (`runners` None: the `runners` context key's); `extend`: adds your own
    resources and grants to the stack (before cdk-nag checks it)."""
    # The feature flags are defaults: cdk.json (which holds the same) and `-c` win over them.
    # post_cli_context: the CLI refuses user context keys under aws:, and this must win over it.
    app = App(
        outdir=outdir,
        context={**FEATURE_FLAGS, **(context or {})},
        post_cli_context=None if bundle else SKIP_BUNDLING,
    )
    stack = ToolpipeStack(
        app,
        stack_name,
        model_base_url=str(app.node.try_get_context("model_base_url") or ""),
        model_name=str(app.node.try_get_context("model_name") or "gpt-4o-mini"),
        app=agents,
        packages=packages,
        requirements=requirements,
        requirements_lock=requirements_lock,
        runners=runners,
        description="toolpipe: durable LLM tool calling",
    )
    if extend is not None:
        extend(stack)
    if not bundle:
        Annotations.of(stack).add_warning_v2(
            "toolpipe:NoBundling",
            "TOOLPIPE_BUNDLE=0: the layers were not built; do not deploy this assembly.",
        )
    # Findings fail the synth; each construct acknowledges its own, with the reason (infra/cdk/constructs/).
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack


def synth(
    stack_name: str = "Toolpipe",
    *,
    agents: str | None = None,
    packages: Sequence[str] = (),
    requirements: Sequence[str] = (),
    requirements_lock: str | os.PathLike[str] | None = None,
    runners: Sequence[str] | None = None,
    extend: Callable[[ToolpipeStack], None] | None = None,
) -> None:
    """Build and synthesize the app, as `cdk synth` and `cdk deploy` run it; a bad setting is
    one line naming it, not a traceback. The arguments are `build_app`'s."""
    try:
        app, _ = build_app(
            bundle=os.environ.get("TOOLPIPE_BUNDLE", "1") != "0",
            stack_name=stack_name,
            agents=agents,
            packages=packages,
            requirements=requirements,
            requirements_lock=requirements_lock,
            runners=runners,
            extend=extend,
        )
    except (ValueError, ConfigurationError) as e:  # a bad context value (`-c api_auth=...`), the app
        sys.exit(f"toolpipe: {e}")
    refused = _refusal_of(app)
    if refused is not None:
        sys.exit(f"toolpipe: {refused}")


def _refusal_of(app: App) -> str | None:
    """Synthesize the app; what CloudFormation would refuse half way through creating a stack,
    as one line naming the setting that grew it (if one did), the resource and the limit."""
    assembly = app.synth()
    for stack in assembly.stacks:
        found = aws_limits.breaches(
            stack.template, stack_name=stack.stack_name, assets=Path(assembly.directory)
        )
        if found:
            breach = found[0]
            measured = _measured_with(stack.template["Resources"], breach.resource.split()[0])
            return f"{_setting_of(measured, app.node.get_all_context())}{breach.line()}"
    return None


def _measured_with(resources: Mapping[str, Any], logical_id: str) -> list[Any]:
    """The resource a breach names and what was measured with it: a role's inline policies are
    mostly `AWS::IAM::Policy` resources naming the role (the CDK's DefaultPolicy)."""
    return [resources.get(logical_id, {}), *aws_limits.inline_policies(resources, logical_id)]


def _setting_of(resources: Sequence[Any], context: Mapping[str, Any]) -> str:
    """`-c NAME: ` for the setting whose value the resources hold (the one that grew them), if
    any: of several, the one that put the most characters there."""
    text = json.dumps(resources, ensure_ascii=False)
    found: dict[str, int] = {}
    for name, value in context.items():
        if name.startswith(("@", "aws:", "cdk")) or value is None:
            continue
        # The value as a whole, else each of a list's (`a,b,c`), as they are written in JSON.
        # Short values (a flag, a number) are in many places: only a value of some length names its setting.
        for parts in ([str(value)], str(value).split(",") if isinstance(value, str) else []):
            held = sum(
                len(part.strip())
                for part in parts
                if len(part.strip()) >= 24 and json.dumps(part.strip(), ensure_ascii=False)[1:-1] in text
            )
            if held:
                found[name] = held
                break
    return f"setting {max(found, key=found.__getitem__)}: " if found else ""


if __name__ == "__main__":
    synth()
