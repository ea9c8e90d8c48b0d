"""The pipeline as a construct for your own CDK app: `from toolpipe.cdk import ToolPipeline`.

`SKIP_BUNDLING`: pass `App(post_cli_context=SKIP_BUNDLING)` to synthesize without building the
layers (no network), for checks and tests; never deploy such an assembly.
"""

# The CDK is the `cdk` extra: a project's tests install only `local` (pyproject.toml). `cdk synth`
# runs the app that imports this module, and a traceback there would bury the one fix.
_CDK_MODULES = {"aws_cdk", "constructs", "cdk_nag", "jsii"}

try:
    from toolpipe.infra.cdk.app import SKIP_BUNDLING, build_app, synth
    from toolpipe.infra.cdk.constructs import ApiAuth, ReservedConcurrency, Throttle
    from toolpipe.infra.cdk.constructs.otel import OtelExport
    from toolpipe.infra.cdk.constructs.triggers import TriggerOptions
    from toolpipe.infra.cdk.pipeline import NO_MODEL_KEY, ToolPipeline
    from toolpipe.infra.cdk.stack import ToolpipeStack
except ModuleNotFoundError as e:
    if (e.name or "").split(".")[0] not in _CDK_MODULES:
        raise
    raise SystemExit(
        f"toolpipe: install toolpipe[cdk] to synthesize ({e.name} is missing;"
        " in a project `toolpipe init` made: pip install -e '.[deploy]')"
    ) from e

__all__ = [
    "NO_MODEL_KEY",
    "SKIP_BUNDLING",
    "ApiAuth",
    "OtelExport",
    "ReservedConcurrency",
    "Throttle",
    "ToolPipeline",
    "ToolpipeStack",
    "TriggerOptions",
    "build_app",
    "synth",
]
