"""The pipeline as a construct for your own CDK app: `from toolpipe.cdk import ToolPipeline`.

`SKIP_BUNDLING`: pass `App(post_cli_context=SKIP_BUNDLING)` to synthesize without building the
layers (no network), for checks and tests; never deploy such an assembly.
"""

from toolpipe.infra.cdk.app import SKIP_BUNDLING, build_app, synth
from toolpipe.infra.cdk.constructs import ApiAuth, ReservedConcurrency, Throttle
from toolpipe.infra.cdk.constructs.otel import OtelExport
from toolpipe.infra.cdk.constructs.triggers import TriggerOptions
from toolpipe.infra.cdk.pipeline import NO_MODEL_KEY, ToolPipeline
from toolpipe.infra.cdk.stack import ToolpipeStack

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
