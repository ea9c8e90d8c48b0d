"""The runs API's two authentication options, on the synthesized template, cdk-nag clean in both.

IAM (SigV4) is the default; `-c api_auth=api_key` (or `ToolPipeline(api_auth="api_key")`)
puts an API key on every method instead, in a usage plan that throttles it.
"""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.cdk.app import SKIP_BUNDLING

API_KEY_CONTEXT = {"api_auth": "api_key", "api_throttle_rate": "50", "api_throttle_burst": "100"}


def _synth(context: dict[str, Any], outdir: Path) -> Any:
    """The Toolpipe stack as `cdk synth -c ...` builds it, cdk-nag included: a finding raises."""
    from aws_cdk import App, Validations
    from aws_cdk.assertions import Template
    from cdk_nag import AwsSolutionsChecks

    from toolpipe.infra.cdk.stack import ToolpipeStack

    app = App(outdir=str(outdir), context=context, post_cli_context=SKIP_BUNDLING)
    ToolpipeStack(app, "Toolpipe")
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return Template.from_json(app.synth().get_stack_by_name("Toolpipe").template)


@pytest.fixture(scope="module")
def api_key_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield _synth(API_KEY_CONTEXT, tmp_path_factory.mktemp("cdk.out"))


def _methods(template: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The API's methods: those the chosen auth guards, and the approval page's."""
    resources = template.find_resources("AWS::ApiGateway::Resource")
    pages = [{"Ref": name} for name, r in resources.items() if r["Properties"]["PathPart"] == "page"]
    methods = [m["Properties"] for m in template.find_resources("AWS::ApiGateway::Method").values()]
    return [m for m in methods if m["ResourceId"] not in pages], [
        m for m in methods if m["ResourceId"] in pages
    ]


def test_by_default_every_method_takes_sigv4_and_no_key(template: Any) -> None:
    methods, page = _methods(template)
    # The runs API (start, list, get, delete, cancel, resume, fork, messages, a message,
    # openapi.json), the approvals API (list, get, approve, deny, answer), a client-executed call's
    # result, and a run's timeline (its JSON, its page, the runs list page).
    assert len(methods) == 19
    assert all(m["AuthorizationType"] == "AWS_IAM" and not m.get("ApiKeyRequired") for m in methods)
    # The approval page (GET, HEAD, POST): the signed link is its credential, never IAM or a key.
    assert sorted(m["HttpMethod"] for m in page) == ["GET", "HEAD", "POST"]
    assert all(m["AuthorizationType"] == "NONE" and m["ApiKeyRequired"] is False for m in page)
    for kind in ("AWS::ApiGateway::ApiKey", "AWS::ApiGateway::UsagePlan", "AWS::ApiGateway::UsagePlanKey"):
        template.resource_count_is(kind, 0)
    assert "ApiKeyId" not in template.to_json()["Outputs"]


@pytest.mark.slow
def test_with_api_keys_every_method_requires_one(api_key_template: Any) -> None:
    methods, page = _methods(api_key_template)
    # The runs API (start, list, get, delete, cancel, resume, fork, messages, a message,
    # openapi.json), the approvals API (list, get, approve, deny, answer), a client-executed call's
    # result, and a run's timeline (its JSON, its page, the runs list page).
    assert len(methods) == 19
    assert all(m["ApiKeyRequired"] is True and m["AuthorizationType"] == "NONE" for m in methods)
    assert len(page) == 3 and all(
        m["AuthorizationType"] == "NONE" and m["ApiKeyRequired"] is False for m in page
    )


@pytest.mark.slow
def test_the_key_is_in_a_usage_plan_that_throttles_it_on_the_stage(api_key_template: Any) -> None:
    t = api_key_template
    [(plan_id, plan)] = t.find_resources("AWS::ApiGateway::UsagePlan").items()
    [(key_id, key)] = t.find_resources("AWS::ApiGateway::ApiKey").items()
    [(api_id, _)] = t.find_resources("AWS::ApiGateway::RestApi").items()
    [(stage_id, stage)] = t.find_resources("AWS::ApiGateway::Stage").items()
    assert plan["Properties"]["Throttle"] == {"RateLimit": 50, "BurstLimit": 100}
    [api_stage] = plan["Properties"]["ApiStages"]
    assert (api_stage["ApiId"], api_stage["Stage"]) == ({"Ref": api_id}, {"Ref": stage_id})
    assert stage["Properties"]["StageName"] == "v1"
    assert key["Properties"]["Enabled"] is True
    assert "Value" not in key["Properties"]  # API Gateway generates it; no secret in the template
    [link] = t.find_resources("AWS::ApiGateway::UsagePlanKey").values()
    assert link["Properties"] == {
        "KeyId": {"Ref": key_id},
        "KeyType": "API_KEY",
        "UsagePlanId": {"Ref": plan_id},
    }
    # Callers fetch the value by id: `aws apigateway get-api-key --api-key ID --include-value`.
    assert t.to_json()["Outputs"]["ApiKeyId"]["Value"] == {"Ref": key_id}


@pytest.mark.slow
def test_only_the_api_changes_with_the_auth_option(template: Any, api_key_template: Any) -> None:
    """Same resources either way, plus the key, its plan and their link."""

    def kinds(t: Any) -> list[str]:
        return sorted(r["Type"] for r in t.to_json()["Resources"].values())

    added = list(kinds(api_key_template))
    for kind in kinds(template):
        added.remove(kind)
    assert sorted(added) == [
        "AWS::ApiGateway::ApiKey",
        "AWS::ApiGateway::UsagePlan",
        "AWS::ApiGateway::UsagePlanKey",
    ]


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"api_auth": "oauth"}, "api_auth must be 'iam' or 'api_key', not 'oauth'"),
        (
            {"api_auth": "api_key", "api_throttle_rate": "fast"},
            "api_throttle_rate must be a number, not 'fast'",
        ),
        (
            {"api_auth": "api_key", "api_throttle_burst": "1.5"},
            "api_throttle_burst must be an integer, not '1.5'",
        ),
        ({"api_auth": "api_key", "api_throttle_rate": "0"}, "must be above 0 requests a second, not 0.0"),
        ({"api_auth": "api_key", "api_throttle_burst": 0}, "burst must be at least 1 request, not 0"),
        ({"api_throttle_rate": -1}, "must be above 0 requests a second, not -1.0"),
    ],
)
def test_a_bad_auth_setting_is_refused_in_one_line(
    context: dict[str, Any], message: str, tmp_path: Path
) -> None:
    from aws_cdk import App

    from toolpipe.infra.cdk.stack import ToolpipeStack

    app = App(outdir=str(tmp_path), context=context, post_cli_context=SKIP_BUNDLING)
    with pytest.raises(ValueError, match=message) as refused:
        ToolpipeStack(app, "Toolpipe")
    assert "\n" not in str(refused.value)


@pytest.mark.slow
def test_the_cdk_app_refuses_a_bad_setting_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """As `cdk synth -c api_auth=oauth` runs the app: context and output folder in the environment."""
    import json
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "TOOLPIPE_BUNDLE": "0",
        "CDK_CONTEXT_JSON": json.dumps({"api_auth": "oauth"}),
        "CDK_OUTDIR": str(tmp_path),
    }
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "toolpipe.infra.cdk.app"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert (
        done.stderr.strip().splitlines()[-1] == "toolpipe: api_auth must be 'iam' or 'api_key', not 'oauth'"
    )
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
