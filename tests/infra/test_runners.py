"""A runner per trust boundary (issue 32, item 3), in the template: one function and one role
per runner, the worker allowed to invoke each and told their names, and a grant for a tool
(the example's SES identity) on its runner's role alone."""

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.infra.policies import per_resource
from tests.infra.test_auth import _synth
from toolpipe.infra.cdk.functions import RUNNER_ENV, TOOL_RUNNER, TOOL_WORKER

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "assistant" / "assistant.template.json"


def _runners(resources: dict[str, Any]) -> dict[str | None, tuple[str, dict[str, Any]]]:
    """Each tool runner's function (logical id, properties), by its runner's name (None: default)."""
    return {
        r["Properties"].get("Environment", {}).get("Variables", {}).get(RUNNER_ENV): (name, r["Properties"])
        for name, r in resources.items()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"]["Handler"] == TOOL_RUNNER.handler
    }


def _role(props: dict[str, Any]) -> str:
    return str(props["Role"]["Fn::GetAtt"][0])


def _statements(resources: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """Every statement of the policies attached to `role`, one resource each."""
    return per_resource(
        [
            statement
            for r in resources.values()
            if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"]["Roles"]
            for statement in r["Properties"]["PolicyDocument"]["Statement"]
        ]
    )


def _worker(resources: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    [(name, props)] = [
        (n, r["Properties"])
        for n, r in resources.items()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"]["Handler"] == TOOL_WORKER.handler
    ]
    return name, props


def test_the_example_grants_ses_to_its_mail_runner_only() -> None:
    resources = json.loads(EXAMPLE.read_text())["Resources"]
    runners = _runners(resources)
    assert set(runners) == {None, "mail"}
    (default_id, default), (mail_id, mail) = runners[None], runners["mail"]
    # The default runner keeps its logical id: a stack deployed before updates it in place.
    assert default_id.startswith("ToolRunner") and not default_id.startswith("ToolRunnerMail")
    assert _role(default) != _role(mail)
    sends = {
        role: [s for s in _statements(resources, role) if "ses:" in json.dumps(s["Action"])]
        for role in (_role(default), _role(mail))
    }
    assert sends[_role(default)] == []
    [grant] = sends[_role(mail)]
    assert grant["Action"] == "ses:SendEmail" and "identity/assistant@example.com" in json.dumps(grant)
    assert "TOOLPIPE_EMAIL_SENDER" not in default.get("Environment", {}).get("Variables", {})
    # The worker knows the mail runner's function, and may invoke it.
    _, worker = _worker(resources)
    assert worker["Environment"]["Variables"]["TOOLPIPE_TOOL_RUNNERS"] == {
        "Fn::Join": ["", ['{"mail":"', {"Ref": mail_id}, '"}']]
    }
    invokes = [
        s["Resource"] for s in _statements(resources, _role(worker)) if s["Action"] == "lambda:InvokeFunction"
    ]
    assert {"Fn::GetAtt": [mail_id, "Arn"]} in invokes and {"Fn::GetAtt": [default_id, "Arn"]} in invokes


@pytest.mark.slow
def test_each_named_runner_is_a_function_and_role_of_its_own_with_the_default_ones_grants(
    tmp_path: Path,
) -> None:
    # cdk-nag runs in the synthesis: each runner's findings are acknowledged as the default one's.
    t = _synth({"runners": "mail,files"}, tmp_path)
    resources = t.to_json()["Resources"]
    runners = _runners(resources)
    assert set(runners) == {None, "mail", "files"}
    roles = {name: _role(props) for name, (_, props) in runners.items()}
    assert len(set(roles.values())) == 3
    for name, (logical_id, props) in runners.items():
        # Its own log group only, and the long answers' prefix: nothing of the pipeline.
        actions = {
            action
            for statement in _statements(resources, roles[name])
            for action in (
                statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            )
        }
        # No runner reads the triggers' input: `read_input` reads through the worker's link.
        assert actions == {
            "logs:CreateLogStream",
            "logs:PutLogEvents",
            "xray:PutTelemetryRecords",
            "xray:PutTraceSegments",
            "s3:PutObject",
        }, name
        assert "TABLE_NAME" not in props["Environment"]["Variables"]
        assert "ManagedPolicyArns" not in resources[roles[name]]["Properties"]
        checkov = {s["id"] for s in resources[logical_id]["Metadata"]["checkov"]["skip"]}
        assert {"CKV_AWS_115", "CKV_AWS_116", "CKV_AWS_117", "CKV_AWS_173"} <= checkov
    _, worker = _worker(resources)
    runner_map = worker["Environment"]["Variables"]["TOOLPIPE_TOOL_RUNNERS"]
    assert {"Ref": runners["mail"][0]} in runner_map["Fn::Join"][1]
    assert {"Ref": runners["files"][0]} in runner_map["Fn::Join"][1]
    # A throttle alarm for each runner, as for the default one.
    alarms = [name for name in resources if resources[name]["Type"] == "AWS::CloudWatch::Alarm"]
    for construct_id in ("ToolRunnerThrottles", "ToolRunnerMailThrottles", "ToolRunnerFilesThrottles"):
        assert any(a.startswith(f"Alarms{construct_id}Alarm") for a in alarms), construct_id


@pytest.mark.parametrize(
    ("runners", "message"),
    [
        ("Mail", "runners: runner must be 1-20 lowercase letters and digits, a letter first"),
        ("mail-box", "runner must be 1-20 lowercase letters and digits, a letter first"),
        ("default", "runner 'default' is where tools that name none run: leave runner unset"),
        ("mail,mail", "runners: a name is given twice in ['mail', 'mail']"),
    ],
)
def test_a_bad_runner_name_is_refused_in_one_line(runners: str, message: str, tmp_path: Path) -> None:
    from aws_cdk import App

    from toolpipe.infra.cdk.app import SKIP_BUNDLING
    from toolpipe.infra.cdk.stack import ToolpipeStack

    app = App(outdir=str(tmp_path), context={"runners": runners}, post_cli_context=SKIP_BUNDLING)
    with pytest.raises(ValueError, match=re.escape(message)) as refused:
        ToolpipeStack(app, "Toolpipe")
    assert "\n" not in str(refused.value)


def test_granting_to_a_runner_the_pipeline_does_not_have_is_refused(tmp_path: Path) -> None:
    from aws_cdk import App

    from toolpipe.infra.cdk.app import SKIP_BUNDLING
    from toolpipe.infra.cdk.stack import ToolpipeStack

    app = App(outdir=str(tmp_path), context={"runners": "mail"}, post_cli_context=SKIP_BUNDLING)
    pipeline = ToolpipeStack(app, "Toolpipe").pipeline
    assert pipeline.tool_runner("mail") is pipeline.functions.tool_runners["mail"]
    assert pipeline.tool_runner() is pipeline.functions.tool_runner
    with pytest.raises(ValueError, match=re.escape("no runner 'files' in this pipeline")):
        pipeline.tool_runner("files")
