"""The CDK feature flags: the installed aws-cdk-lib's recommended set, applied wherever the app
is built (`build_app`, cdk.json for the CDK CLI, a scaffolded project's cdk.json)."""

import json
import tarfile
from pathlib import Path
from typing import Any

import aws_cdk
import pytest

from toolpipe.infra.cdk.feature_flags import FEATURE_FLAGS, RECOMMENDED_BY
from toolpipe.infra.cli.scaffold import project_files

ROOT = Path(__file__).resolve().parents[2]


def _recommended() -> dict[str, Any]:
    """What `cdk init` writes for the installed aws-cdk-lib: the recommended-feature-flags.json
    its package ships (the CLI's init templates hold the same file)."""
    [package] = (Path(aws_cdk.__file__).parent / "_jsii").glob("aws-cdk-lib@*.jsii.tgz")
    with tarfile.open(package) as archive:
        member = archive.extractfile("package/recommended-feature-flags.json")
        assert member is not None
        flags: dict[str, Any] = json.load(member)
    return flags


def _flags(context: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in context.items() if name.startswith("@aws-cdk")}


def test_the_flags_are_the_installed_aws_cdk_libs_recommended_set() -> None:
    recommended = _recommended()
    new = sorted(set(recommended) - set(FEATURE_FLAGS))
    assert not new, (
        f"aws-cdk-lib recommends flags infra/cdk/feature_flags.py ({RECOMMENDED_BY}) does not set: {new}. "
        "Synthesize with and without each and review the template diff (logical ids, replacements) "
        "before adding it."
    )
    assert recommended == FEATURE_FLAGS


def test_cdk_json_sets_the_same_flags_as_build_app() -> None:
    """The CDK CLI passes cdk.json's context; the tests build the app with `build_app`."""
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    assert _flags(context) == FEATURE_FLAGS


def test_a_scaffolded_project_sets_the_same_flags() -> None:
    cdk_json = json.loads(project_files("flagged_agents", taken_ok=True)["cdk.json"])
    assert cdk_json["app"] == "python cdk_app.py"
    assert _flags(cdk_json["context"]) == FEATURE_FLAGS


@pytest.mark.parametrize("context", [{}, {"@aws-cdk/aws-iam:minimizePolicies": False}])
def test_build_app_applies_the_flags_and_context_wins(context: dict[str, Any], tmp_path: Path) -> None:
    from aws_cdk import FeatureFlags

    from toolpipe.infra.cdk.app import build_app

    _, stack = build_app(bundle=False, outdir=str(tmp_path), context=context)
    enabled = FeatureFlags.of(stack)
    assert enabled.is_enabled("@aws-cdk/aws-apigateway:logGroupDestinationArnWithoutWildcard")
    assert enabled.is_enabled("@aws-cdk/aws-iam:minimizePolicies") is (not context)


def test_the_synthesized_stack_was_built_with_the_flags(template: Any) -> None:
    """Two flags show in the template: merged policy statements, and the access-log ARN."""
    [stage] = template.find_resources("AWS::ApiGateway::Stage").values()
    destination = stage["Properties"]["AccessLogSetting"]["DestinationArn"]
    assert "Fn::Join" in destination, destination  # the log group's ARN without its `:*`
    policies = template.find_resources("AWS::IAM::Policy")
    answers = next(p for name, p in policies.items() if name.startswith("OrchestratorAnswersParentTasks"))
    # One statement for the state machine's actions, merged; one for its executions' histories.
    assert len(answers["Properties"]["PolicyDocument"]["Statement"]) == 2
