"""The docs' `ToolPipeline` example (docs/snippets/construct_app.py) runs as written and synthesizes a stack of your own."""

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.cdk.app import SKIP_BUNDLING

ROOT = Path(__file__).resolve().parents[2]


def _example() -> str:
    return (ROOT / "docs" / "snippets" / "construct_app.py").read_text()


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Runs the example as `cdk synth` would, the App told where to write and to skip building
    the layers (no network). Through `App`'s arguments: the CLI's environment variables would
    not reach jsii's node process, which started with this one."""
    import aws_cdk

    outdir = tmp_path_factory.mktemp("cdk.out")
    app = functools.partial(aws_cdk.App, outdir=str(outdir), post_cli_context=SKIP_BUNDLING)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(aws_cdk, "App", app)
        # cdk-nag is in the example: an unacknowledged finding raises here.
        exec(compile(_example(), "construct_app.py", "exec"), {"__name__": "docs"})
    return outdir, json.loads((outdir / "MyService.template.json").read_text())


@pytest.mark.slow
def test_the_example_builds_the_whole_pipeline_inside_your_stack(
    synthesized: tuple[Path, dict[str, Any]],
) -> None:
    _, template = synthesized
    kinds = [r["Type"] for r in template["Resources"].values()]
    for kind, count in {
        "AWS::DynamoDB::Table": 2,  # the history; the model's rate budgets
        "AWS::S3::Bucket": 2,  # contents; the triggers' input bucket
        "AWS::StepFunctions::StateMachine": 1,
        "AWS::Events::Rule": 2,  # execution ended; RunRequested
        "AWS::ApiGateway::RestApi": 1,
        "AWS::ApiGateway::ApiKey": 1,
        "AWS::ApiGateway::UsagePlan": 1,
    }.items():
        assert kinds.count(kind) == count, kind
    assert kinds.count("AWS::Lambda::Function") >= 3
    # Under your construct's id, with CDK's usual path-based ids (not the Toolpipe stack's).
    assert all(
        name.startswith("Agents")
        for name, r in template["Resources"].items()
        # CDK keeps one bucket-notifications handler per stack, at the stack's root.
        if r["Type"] != "AWS::CDK::Metadata" and not name.startswith("BucketNotificationsHandler")
    )
    [plan] = [r for r in template["Resources"].values() if r["Type"] == "AWS::ApiGateway::UsagePlan"]
    assert plan["Properties"]["Throttle"] == {"RateLimit": 5, "BurstLimit": 10}
    assert "AgentsApiUrl" in template["Outputs"]


@pytest.mark.slow
def test_the_function_code_asset_is_our_source_and_nothing_else(
    synthesized: tuple[Path, dict[str, Any]],
) -> None:
    outdir, template = synthesized
    [key] = {
        r["Properties"]["Code"]["S3Key"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"].get("Runtime", "").startswith("python3.14")
    }
    asset = outdir / f"asset.{key.removesuffix('.zip')}"
    # toolpipe's runtime and the app's package (the docs name `assistant.agents`); not the
    # CDK app or the local emulator.
    assert sorted(p.name for p in asset.iterdir()) == ["assistant", "toolpipe"]
    assert sorted(p.name for p in (asset / "toolpipe").iterdir()) == ["__init__.py", "functions", "shared"]
    assert not [p for p in asset.rglob("*") if p.name == "__pycache__" or p.suffix == ".pyc"]
