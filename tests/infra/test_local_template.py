"""The template the local runtime is built from is the one `cdk deploy` ships."""

import difflib
import json
from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.local import template as local_template

pytestmark = pytest.mark.slow


def test_the_packaged_template_is_the_stack_synthesized_now(template: Any) -> None:
    fresh = local_template.dumps(template.to_json())
    packaged = local_template.PACKAGED.read_text()
    if fresh != packaged:
        diff = "".join(
            list(
                difflib.unified_diff(
                    packaged.splitlines(True), fresh.splitlines(True), "packaged", "synthesized"
                )
            )[:60]
        )
        pytest.fail(f"the local runtime's template is stale: run `make local-template`\n{diff}")


def test_the_examples_template_is_its_cdk_app_synthesized_now() -> None:
    """The example's own CDK app adds a grant (its `send_email` tool's SES identity): the
    template the local runtime runs it with is that app's, kept as fresh as toolpipe's."""
    project = Path(__file__).parents[2] / "examples" / "assistant"
    path = local_template.project_template_path(project)
    fresh = local_template.dumps(local_template.synthesize_project(project))
    assert fresh == path.read_text(), "the example's template is stale: run `make local-template`"
    assert "ses:SendEmail" in fresh


def test_normalizing_keeps_everything_but_asset_locations(template: Any) -> None:
    raw = template.to_json()
    normalized = json.loads(local_template.dumps(raw))
    kept = {name for name, r in raw["Resources"].items() if r["Type"] != "AWS::CDK::Metadata"}
    assert set(normalized["Resources"]) == kept
    for name in kept:
        assert normalized["Resources"][name]["Type"] == raw["Resources"][name]["Type"]
    # Only where the code lives is left out.
    layer = next(r for r in normalized["Resources"].values() if r["Type"] == "AWS::Lambda::LayerVersion")
    assert layer["Properties"]["Content"]["S3Key"] == "<asset>"
