"""The model key's three options on the synthesized template (issue 10, item 3), cdk-nag clean:
an empty secret the stack creates (the default), a secret of yours read as is (its ARN, and its
KMS key), or none for an endpoint that takes no key."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.infra.policies import per_resource
from toolpipe.infra.cdk.app import SKIP_BUNDLING
from toolpipe.infra.cdk.functions import ORCHESTRATOR

SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:openai-key-AbCdEf"
KMS_KEY_ARN = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
SELF_HOSTED = "http://10.0.0.5:8000/v1"


def _synth(context: dict[str, Any], outdir: Path) -> dict[str, Any]:
    """The Toolpipe stack as `cdk synth -c ...` builds it, cdk-nag included: a finding raises."""
    from toolpipe.infra.cdk.app import build_app

    app, _ = build_app(bundle=False, outdir=str(outdir), context=context)
    return dict(app.synth().get_stack_by_name("Toolpipe").template)


@pytest.fixture(scope="module")
def given_secret(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    context = {"model_key_secret_arn": SECRET_ARN, "model_key_kms_key_arn": KMS_KEY_ARN}
    yield _synth(context, tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="module")
def no_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    context = {"model_key_secret_arn": "none", "model_base_url": SELF_HOSTED}
    yield _synth(context, tmp_path_factory.mktemp("cdk.out"))


def _resources(template: dict[str, Any], kind: str) -> dict[str, Any]:
    """The template's resources of `kind`, the approval links' signing key left out: it is
    there whatever the model key's option (tests/infra/test_approval_links.py)."""
    return {
        name: r
        for name, r in template["Resources"].items()
        if r["Type"] == kind and name not in _signing_keys(template)
    }


def _signing_keys(template: dict[str, Any]) -> set[str]:
    return {
        name
        for name, r in template["Resources"].items()
        if r["Type"] == "AWS::SecretsManager::Secret"
        and r["Properties"].get("Description", "").startswith("HMAC key of toolpipe's signed approval links")
    }


def _orchestrator_env(template: dict[str, Any]) -> dict[str, Any]:
    [function] = [
        f
        for f in _resources(template, "AWS::Lambda::Function").values()
        if f["Properties"]["Handler"] == ORCHESTRATOR.handler
    ]
    return dict(function["Properties"]["Environment"]["Variables"])


def _statements(template: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Every IAM statement, anywhere in the template, with an action starting with `prefix`."""
    found = []
    for policy in _resources(template, "AWS::IAM::Policy").values():
        for statement in per_resource(policy["Properties"]["PolicyDocument"]["Statement"]):
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if any(a.startswith(prefix) for a in actions) and statement["Resource"] not in [
                {"Ref": key} for key in _signing_keys(template)
            ]:
                found.append(statement)
    return found


def test_by_default_the_secret_is_created_empty_and_only_the_orchestrator_reads_it(template: Any) -> None:
    t = template.to_json()
    [(name, secret)] = _resources(t, "AWS::SecretsManager::Secret").items()
    # No value at all: not a generated one the provider would answer with a 401.
    assert "GenerateSecretString" not in secret["Properties"]
    assert "SecretString" not in secret["Properties"]
    assert _orchestrator_env(t)["OPENAI_API_KEY_SECRET_ARN"] == {"Ref": name}
    [read] = _statements(t, "secretsmanager:")
    assert read["Resource"] == {"Ref": name}
    assert t["Outputs"]["ModelApiKeySecretArn"]["Value"] == {"Ref": name}
    assert _statements(t, "kms:") == []


@pytest.mark.slow
def test_a_given_secret_is_read_as_is_and_nothing_is_created(given_secret: dict[str, Any]) -> None:
    t = given_secret
    assert _resources(t, "AWS::SecretsManager::Secret") == {}
    assert _orchestrator_env(t)["OPENAI_API_KEY_SECRET_ARN"] == SECRET_ARN
    # Exactly that ARN: no wildcard, no other secret.
    [read] = _statements(t, "secretsmanager:")
    assert read["Resource"] == SECRET_ARN
    assert "secretsmanager:GetSecretValue" in read["Action"]
    # Its customer-managed key, only as Secrets Manager uses it.
    [decrypt] = _statements(t, "kms:")
    assert decrypt["Action"] == "kms:Decrypt" and decrypt["Resource"] == KMS_KEY_ARN
    assert decrypt["Condition"] == {
        "StringEquals": {"kms:ViaService": "secretsmanager.eu-west-1.amazonaws.com"}
    }
    assert t["Outputs"]["ModelApiKeySecretArn"]["Value"] == SECRET_ARN


@pytest.mark.slow
def test_an_endpoint_without_a_key_gets_no_secret_and_no_grant(no_key: dict[str, Any]) -> None:
    t = no_key
    assert _resources(t, "AWS::SecretsManager::Secret") == {}
    env = _orchestrator_env(t)
    assert "OPENAI_API_KEY_SECRET_ARN" not in env and env["OPENAI_BASE_URL"] == SELF_HOSTED
    assert _statements(t, "secretsmanager:") == [] and _statements(t, "kms:") == []
    assert "ModelApiKeySecretArn" not in t["Outputs"]


@pytest.mark.parametrize(
    ("context", "message"),
    [
        (
            {"model_key_secret_arn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:openai-key"},
            "model_key_secret_arn must be a secret's complete ARN",
        ),
        ({"model_key_secret_arn": "none"}, "model_key_secret_arn=none needs model_base_url"),
        ({"model_key_kms_key_arn": KMS_KEY_ARN}, "model_key_kms_key_arn goes with model_key_secret_arn"),
        (
            {"model_key_secret_arn": SECRET_ARN, "model_key_kms_key_arn": "alias/mine"},
            "model_key_kms_key_arn must be a KMS key ARN",
        ),
    ],
)
def test_a_key_setting_that_cannot_work_stops_the_synth_in_one_line(
    context: dict[str, str], message: str
) -> None:
    from aws_cdk import App

    from toolpipe.infra.cdk.stack import ToolpipeStack

    app = App(context=context, post_cli_context=SKIP_BUNDLING)
    with pytest.raises(ValueError, match="^" + message) as raised:
        ToolpipeStack(app, "Toolpipe", model_base_url=str(app.node.try_get_context("model_base_url") or ""))
    assert "\n" not in str(raised.value)


def test_the_construct_takes_the_same_choices(tmp_path: Path) -> None:
    """`ToolPipeline(model_key_secret=...)` in a stack of your own: nothing is created for yours."""
    from aws_cdk import App, Stack
    from aws_cdk.assertions import Template

    from toolpipe.infra.cdk.pipeline import ToolPipeline

    app = App(outdir=str(tmp_path), post_cli_context=SKIP_BUNDLING)
    stack = Stack(app, "MyService")
    pipeline = ToolPipeline(stack, "Agents", model_key_secret=SECRET_ARN)
    assert pipeline.model_key is not None and pipeline.model_key.secret_arn == SECRET_ARN
    template = dict(Template.from_stack(stack).to_json())
    assert _resources(template, "AWS::SecretsManager::Secret") == {}
    assert json.dumps(_statements(template, "secretsmanager:")).count(SECRET_ARN) == 1


ROOT = Path(__file__).resolve().parents[2]


def _deploy_section() -> str:
    return (ROOT / "docs" / "operations" / "deploy.md").read_text()


def test_the_docs_deploy_path_names_only_context_keys_outputs_and_flags_that_exist(
    template: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    from toolpipe.infra.cli import main
    from toolpipe.shared.model.errors import ModelKeyNotSetError

    section = _deploy_section()
    read = set(
        re.findall(
            r'try_get_context\("(\w+)"\)',
            "".join(p.read_text() for p in (ROOT / "infra" / "cdk").glob("*.py")),
        )
    )
    keys = set(re.findall(r"-c (\w+)=", section))
    assert {"model_name", "model_base_url", "model_key_secret_arn", "model_key_kms_key_arn"} <= keys
    assert keys <= read, keys - read
    outputs = set(re.findall(r"OutputKey=='(\w+)'", section))
    assert outputs == {"ModelApiKeySecretArn", "ApiUrl"}
    assert outputs <= set(template.to_json()["Outputs"])
    # The error it quotes is the one a run records (up to the secret's ARN, made up there).
    quoted = re.search(r"error: ModelKeyNotSetError: (.*)", section)
    assert quoted is not None
    arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:ModelApiKey…-AbCdEf"
    assert quoted.group(1) == str(ModelKeyNotSetError(arn))
    # Every flag the section gives `toolpipe run` and `toolpipe show` is one they take.
    for command in ("run", "show"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        usage = capsys.readouterr().out
        lines = re.findall(rf"toolpipe {command} [^\n`]*", section)
        flags = {flag for line in lines for flag in re.findall(r"(--[a-z-]+)", line)}
        assert command == "show" or {"--api", "--agent"} <= flags
        for flag in flags:
            assert flag in usage, (command, flag)
    assert "--api-key" in section and "TOOLPIPE_API_URL" in section and "TOOLPIPE_API_KEY" in section
