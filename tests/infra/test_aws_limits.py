"""The limits AWS applies to values as they resolve at deploy time (infra/cdk/aws_limits.py): the
gate (`make check-deploy`'s `aws-limits`), `synth` and the local runtime each refuse a template that
breaks one, in one line naming the resource and the limit. The templates are the committed one
(`make local-template`: toolpipe's stack, default settings), changed the way a setting or a
deployer's own grants would change it."""

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.cdk import app as cdk_app
from toolpipe.infra.cdk import aws_limits
from toolpipe.infra.cdk.app import _measured_with, _setting_of
from toolpipe.infra.cdk.deploy_checks import main
from toolpipe.infra.cdk.functions import ORCHESTRATOR, TRIGGERS
from toolpipe.infra.local import template as local_template
from toolpipe.infra.local.runtime import LocalRuntime
from toolpipe.infra.local.template import TemplateError

Change = Callable[[dict[str, Any]], None]


def _committed() -> dict[str, Any]:
    return json.loads(local_template.PACKAGED.read_text())


def _function(template: dict[str, Any], handler: str) -> tuple[str, dict[str, Any]]:
    return next(
        (k, r)
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"].get("Handler") == handler
    )


def _long_instructions(template: dict[str, Any]) -> None:
    """What `-c trigger_instructions=<3,700 characters>` synthesizes (cfn-lint passes it)."""
    _, fn = _function(template, TRIGGERS.handler)
    fn["Properties"]["Environment"]["Variables"]["TOOLPIPE_TRIGGER_INSTRUCTIONS"] = "Summarize it. " * 265


def _big_inline_policy(template: dict[str, Any]) -> None:
    """A deployer's grants for many tables, on the worker's role (e.g. through `extend`)."""
    policy = next(
        p for k, p in template["Resources"].items() if k.startswith("ToolWorkerServiceRoleDefaultPolicy")
    )
    policy["Properties"]["PolicyDocument"]["Statement"].append(
        {
            "Effect": "Allow",
            "Action": "dynamodb:GetItem",
            "Resource": [
                f"arn:aws:dynamodb:eu-west-1:123456789012:table/customer-table-{i:04}" for i in range(150)
            ],
        }
    )


def _big_managed_policy(template: dict[str, Any]) -> None:
    role = next(k for k in template["Resources"] if k.startswith("ToolRunnerServiceRole"))
    template["Resources"]["ToolsBuckets"] = {
        "Type": "AWS::IAM::ManagedPolicy",
        "Properties": {
            "Roles": [{"Ref": role}],
            "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": "s3:GetObject",
                        "Resource": [f"arn:aws:s3:::customer-documents-{i:04}/*" for i in range(160)],
                    }
                ],
            },
        },
    }


def _heartbeat_as_long_as_the_timeout(template: dict[str, Any]) -> None:
    _, fn = _function(template, ORCHESTRATOR.handler)
    variables = fn["Properties"]["Environment"]["Variables"]
    variables["TOOLPIPE_CALL_HEARTBEAT_SECONDS"] = variables["TOOLPIPE_CALL_TIMEOUT_SECONDS"]


BREAKS: dict[str, tuple[Change, str]] = {
    "environment-over-4-KB": (_long_instructions, "the function's environment (Lambda's 4 KB)"),
    "inline-policies-over-10240": (_big_inline_policy, "the role's inline policies together"),
    "managed-policy-over-6144": (_big_managed_policy, "the managed policy is"),
    "heartbeat-not-below-timeout": (
        _heartbeat_as_long_as_the_timeout,
        "Dispatch: the task's heartbeat",
    ),
}


def _write(tmp_path: Path, change: Change) -> Path:
    template = _committed()
    change(template)
    path = tmp_path / "template.json"
    path.write_text(json.dumps(template))
    return path


def test_the_committed_template_is_within_every_limit() -> None:
    assert aws_limits.breaches(_committed()) == []


@pytest.mark.parametrize("name", list(BREAKS))
def test_the_gate_fails_in_one_line_on_a_value_over_an_aws_limit(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    change, named = BREAKS[name]
    code = main(["--template", str(_write(tmp_path, change)), "--checks", "aws-limits"])
    out, err = capsys.readouterr()
    assert code == 1
    assert out.splitlines()[0].startswith("aws-limits     FAIL")
    [line] = err.splitlines()
    assert line.startswith("check-deploy: aws-limits failed: ") and named in line and "over AWS's" in line, (
        line
    )


def test_values_are_measured_as_resolved_with_the_longest_arns() -> None:
    """cfn-lint's E3697 counts a `Ref` as its few characters; resolved, it is an ARN or a URL."""
    template = _committed()
    _, fn = _function(template, TRIGGERS.handler)
    variables = fn["Properties"]["Environment"]["Variables"]
    literal = aws_limits.environment_bytes(variables)
    resolved = aws_limits.environment_bytes(aws_limits.WorstCase(template).resolve(variables))
    assert resolved > literal
    # Room left for the instructions is what the resolved size leaves: a value that fits the
    # literal count but not the resolved one is refused.
    room = aws_limits.LAMBDA_ENVIRONMENT_BYTES - resolved
    variables["TOOLPIPE_TRIGGER_INSTRUCTIONS"] = "x" * (
        room + len(variables["TOOLPIPE_TRIGGER_INSTRUCTIONS"]) + 1
    )
    assert aws_limits.environment_bytes(variables) <= aws_limits.LAMBDA_ENVIRONMENT_BYTES
    assert [b.resource for b in aws_limits.breaches(template)] == [_function(template, TRIGGERS.handler)[0]]


def test_a_literal_heartbeat_not_below_its_timeout_is_a_breach() -> None:
    template = _committed()
    machine = next(
        r for r in template["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"
    )
    definition = copy.deepcopy(machine["Properties"])
    machine["Properties"] = {
        "Definition": {
            "StartAt": "Wait",
            "States": {
                "Wait": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::activity:x",
                    "HeartbeatSeconds": 60,
                    "TimeoutSeconds": 60,
                    "End": True,
                }
            },
        }
    }
    [breach] = aws_limits.breaches(template)
    assert breach.resource.endswith("state Wait") and (breach.measured, breach.allowed) == (60, 59)
    machine["Properties"] = definition
    assert aws_limits.breaches(template) == []


def test_the_local_runtime_refuses_to_start_from_a_template_aws_would_refuse(tmp_path: Path) -> None:
    path = _write(tmp_path, _long_instructions)
    refusal = (
        r"AWS would refuse this stack: TriggersFunction\w+: the function's environment "
        r"\(Lambda's 4 KB\) is [\d,]+ bytes, over AWS's 4,096"
    )
    with pytest.raises(TemplateError, match=refusal), LocalRuntime(workers=0, template_path=path):
        pass


@pytest.mark.slow
def test_synth_refuses_a_setting_that_breaks_a_limit_in_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cdk synth -c trigger_instructions=...` runs `synth`: the setting, the resource, the limit,
    as its exit message (one line on stderr, no traceback). In this process, where the CDK is
    already loaded: the context goes in through `build_app`'s, where the app's context from `-c`
    ends up too (tests/infra/test_auth.py runs the app as a process, CDK_CONTEXT_JSON and all, to
    the same kind of exit)."""
    context = {"trigger_instructions": "Summarize the document. " * 154}
    build_app = cdk_app.build_app

    def with_context(**kwargs: Any) -> Any:
        return build_app(**kwargs, outdir=str(tmp_path / "cdk.out"), context=context)

    monkeypatch.setattr(cdk_app, "build_app", with_context)
    monkeypatch.setenv("TOOLPIPE_BUNDLE", "0")
    with pytest.raises(SystemExit) as exited:
        cdk_app.synth()
    line = str(exited.value.code)
    assert "\n" not in line
    assert line.startswith("toolpipe: setting trigger_instructions: TriggersFunction"), line
    assert "the function's environment (Lambda's 4 KB) is" in line and "over AWS's 4,096" in line


def test_the_state_machine_logs_under_vendedlogs(template: Any) -> None:
    """Outside /aws/vendedlogs/, Step Functions adds a statement to the account's one CloudWatch
    Logs resource policy (5,120 characters for every delivery): an account with many state
    machines fills it and the next stack fails to create."""
    resources = template.to_json()["Resources"]
    [machine] = [r for r in resources.values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    [destination] = machine["Properties"]["LoggingConfiguration"]["Destinations"]
    group = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    assert resources[group]["Properties"]["LogGroupName"].startswith("/aws/vendedlogs/states/")


def test_layers_and_unzipped_size_are_counted_where_the_assembly_holds_them(tmp_path: Path) -> None:
    """Five layers at most; code and layers at most 250 MB unzipped, known when a bundled
    synthesis staged them (a deployer's `requirements_lock` grows the dependencies layer)."""
    template = _committed()
    name, fn = _function(template, TRIGGERS.handler)
    fn["Properties"]["Layers"] = [f"arn:aws:lambda:eu-west-1:123456789012:layer:extra{i}:1" for i in range(6)]
    [layers] = aws_limits.breaches(template)
    assert (layers.resource, layers.measured, layers.unit) == (name, 6, "layers")

    template = _committed()
    name, fn = _function(template, TRIGGERS.handler)
    fn["Metadata"] = {"aws:asset:path": "asset.code"}
    layer = fn["Properties"]["Layers"][0]["Ref"]
    template["Resources"][layer]["Metadata"] = {"aws:asset:path": "asset.layer"}
    for folder, size in (("asset.code", 12_000_000), ("asset.layer", 251_000_000)):
        (tmp_path / folder).mkdir()
        with (tmp_path / folder / "blob").open("wb") as f:
            f.truncate(size)  # sparse: counted by its size, no disk used
    [unzipped] = aws_limits.breaches(template, assets=tmp_path)
    assert unzipped.resource == name and unzipped.measured == 263_000_000
    assert aws_limits.breaches(template) == []  # not staged here: not counted


def test_what_cannot_be_resolved_is_measured_as_written_never_refused() -> None:
    """A deployer's own grant may use an intrinsic the offline resolver lacks (`Fn::ImportValue`,
    `Fn::If`): it is measured as its text, as cfn-lint does, and the local runtime still starts."""
    template = _committed()
    _, fn = _function(template, TRIGGERS.handler)
    fn["Properties"]["Environment"]["Variables"]["SHARED_TABLE"] = {"Fn::ImportValue": "shared-table-name"}
    policy = next(
        p for k, p in template["Resources"].items() if k.startswith("ToolRunnerServiceRoleDefaultPolicy")
    )
    policy["Properties"]["PolicyDocument"]["Statement"].append(
        {
            "Effect": "Allow",
            "Action": "s3:GetObject",
            "Resource": {"Fn::If": ["Prod", "arn:aws:s3:::a/*", "arn:aws:s3:::b/*"]},
        }
    )
    assert aws_limits.breaches(template) == []
    fn["Properties"]["Environment"]["Variables"]["HUGE"] = {"Fn::ImportValue": "x" * 4000}
    assert [b.limit for b in aws_limits.breaches(template)] == ["the function's environment (Lambda's 4 KB)"]


def test_a_condition_is_measured_as_the_branch_deploy_time_takes_never_both() -> None:
    """A project's app choosing between two instructions by a Condition: each branch fits in
    4 KB, and CloudFormation sets one of them; measuring both together refused a valid stack."""
    template = _committed()
    template["Conditions"] = {"Prod": {"Fn::Equals": [{"Ref": "AWS::AccountId"}, "123456789012"]}}
    _, fn = _function(template, TRIGGERS.handler)
    variables = fn["Properties"]["Environment"]["Variables"]
    variables["TOOLPIPE_TRIGGER_INSTRUCTIONS"] = {
        "Fn::If": ["Prod", "Summarize it. " * 140, "Translate it. " * 140]
    }
    variables["OPTIONAL"] = {"Fn::If": ["Prod", "x", {"Ref": "AWS::NoValue"}]}
    assert aws_limits.breaches(template) == []
    # The longer branch is the one measured: over 4 KB on its own, refused.
    variables["TOOLPIPE_TRIGGER_INSTRUCTIONS"]["Fn::If"][2] = "Translate it. " * 300
    assert [b.limit for b in aws_limits.breaches(template)] == ["the function's environment (Lambda's 4 KB)"]


def test_fn_sub_resolves_its_references_to_their_worst_case() -> None:
    """`Fn::Sub` (a CDK app's `Fn.sub`) grows as much as the `Fn::Join` it stands for: measured
    as written, an ARN of ~90 characters counted as the 18 of `${Table.Arn}/index/*`."""
    resources = {
        "Table": {"Type": "AWS::DynamoDB::Table", "Properties": {}},
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {}},
    }
    worst = aws_limits.WorstCase({"Resources": resources})
    joined = {"Fn::Join": ["", [{"Fn::GetAtt": ["Table", "Arn"]}, "/index/*"]]}
    assert worst.resolve({"Fn::Sub": "${Table.Arn}/index/*"}) == worst.resolve(joined)
    assert worst.resolve({"Fn::Sub": ["${Q} in ${AWS::Region}, ${!Literal}", {"Q": {"Ref": "Queue"}}]}) == (
        f"{worst.resolve({'Ref': 'Queue'})} in {aws_limits.LONGEST_REGION}, ${{Literal}}"
    )


def test_synth_names_the_setting_that_grew_the_resource() -> None:
    """Of two settings a function holds, the one that put the most there is named (the context
    lists cdk.json's first); a value in any language is found; a role's inline policies are
    measured with the policies that name it, where a setting's ARNs are."""
    instructions = "Résumez le document, en français. " * 110
    base_url = "https://gateway.example.com/openai/v1"
    function = {
        "Type": "AWS::Lambda::Function",
        "Properties": {
            "Environment": {
                "Variables": {
                    "TOOLPIPE_MODEL_BASE_URL": base_url,
                    "TOOLPIPE_TRIGGER_INSTRUCTIONS": instructions,
                }
            }
        },
    }
    context = {"model_base_url": base_url, "trigger_instructions": instructions}
    assert _setting_of([function], context) == "setting trigger_instructions: "

    secrets = [
        f"arn:aws:secretsmanager:eu-west-1:123456789012:secret:mcp/header-{i:04}-AbCdEf" for i in range(3)
    ]
    resources = {
        "Role": {"Type": "AWS::IAM::Role", "Properties": {}},
        "RoleDefaultPolicy": {
            "Type": "AWS::IAM::Policy",
            "Properties": {
                "Roles": [{"Ref": "Role"}],
                "PolicyDocument": {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": secrets}]},
            },
        },
    }
    context = {"model_base_url": base_url, "mcp_header_secrets": ",".join(secrets)}
    assert _setting_of(_measured_with(resources, "Role"), context) == "setting mcp_header_secrets: "


def test_a_parameter_is_measured_at_the_longest_the_template_lets_it_be() -> None:
    """A project's app passing text through a `CfnParameter`: measured as `{"Ref": ...}` (15
    characters), 4,000 characters of default passed the gate and Lambda refused them."""
    template = _committed()
    template["Parameters"] = {
        "Instructions": {"Type": "String", "Default": "Summarize it. " * 300},
        "Bounded": {"Type": "String", "MaxLength": 5000},
        "Stage": {"Type": "String", "AllowedValues": ["dev", "production"]},
        "Sizes": {"Type": "List<Number>", "Default": "1,2"},
    }
    _, fn = _function(template, TRIGGERS.handler)
    fn["Properties"]["Environment"]["Variables"]["INSTRUCTIONS"] = {"Ref": "Instructions"}
    [breach] = aws_limits.breaches(template)
    assert breach.limit == "the function's environment (Lambda's 4 KB)" and breach.measured > 4200
    worst = aws_limits.WorstCase(template)
    assert worst.resolve({"Ref": "Bounded"}) == "x" * 5000
    assert worst.resolve({"Ref": "Stage"}) == "production"
    assert worst.resolve({"Ref": "Sizes"}) == '{"Ref":"Sizes"}'  # not known: measured as written


def test_references_resolve_to_what_cloudformation_returns_for_their_type() -> None:
    """A version's or an alias's `Ref` is its qualified ARN, a stream's ARN ends in its label, a
    rule on a custom bus has the bus in its ARN, a key's ARN its id (CloudFormation's return
    values): each was shorter here than on AWS, or another thing."""
    resources = {
        "Fn": {"Type": "AWS::Lambda::Function", "Properties": {}},
        "Version": {"Type": "AWS::Lambda::Version", "Properties": {"FunctionName": {"Ref": "Fn"}}},
        "Alias": {
            "Type": "AWS::Lambda::Alias",
            "Properties": {"FunctionName": {"Ref": "Fn"}, "Name": "live"},
        },
        "Bus": {"Type": "AWS::Events::EventBus", "Properties": {"Name": "runs"}},
        "Rule": {"Type": "AWS::Events::Rule", "Properties": {"EventBusName": {"Ref": "Bus"}}},
        "Key": {"Type": "AWS::KMS::Key", "Properties": {}},
        "Table": {"Type": "AWS::DynamoDB::Table", "Properties": {}},
    }
    worst = aws_limits.WorstCase({"Resources": resources})
    function = worst.resolve({"Fn::GetAtt": ["Fn", "Arn"]})
    assert worst.resolve({"Ref": "Version"}) == f"{function}:99999"
    assert worst.resolve({"Ref": "Alias"}) == f"{function}:live"
    assert worst.resolve({"Fn::GetAtt": ["Rule", "Arn"]}).endswith(f":rule/runs/{worst.name('Rule')}")
    assert worst.resolve({"Fn::GetAtt": ["Key", "Arn"]}).endswith(f":key/{'x' * 36}")
    table = worst.resolve({"Fn::GetAtt": ["Table", "Arn"]})
    assert worst.resolve({"Fn::GetAtt": ["Table", "StreamArn"]}) == f"{table}/stream/2026-01-01T00:00:00.000"


def test_a_role_policy_resource_counts_among_its_roles_inline_policies() -> None:
    """`AWS::IAM::RolePolicy` (a project's own template) is an inline policy of the role it
    names: it was left out of the role's 10,240 characters."""
    template = _committed()
    role = next(k for k, r in template["Resources"].items() if k.startswith("ToolWorkerServiceRole"))
    statement = {
        "Effect": "Allow",
        "Action": "dynamodb:GetItem",
        "Resource": [
            f"arn:aws:dynamodb:eu-west-1:123456789012:table/customer-table-{i:04}" for i in range(150)
        ],
    }
    template["Resources"]["WorkerTables"] = {
        "Type": "AWS::IAM::RolePolicy",
        "Properties": {
            "RoleName": {"Ref": role},
            "PolicyName": "tables",
            "PolicyDocument": {"Version": "2012-10-17", "Statement": [statement]},
        },
    }
    [breach] = aws_limits.breaches(template)
    assert (breach.resource, breach.limit) == (role, "the role's inline policies together")


def test_the_gate_measures_generated_names_with_the_stack_the_file_is_named_after(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A project's stack name goes into every name CloudFormation generates: `cdk synth` writes
    `<stack>.template.json`, and the gate reads the name from there."""
    template = _committed()
    _, fn = _function(template, TRIGGERS.handler)
    variables = fn["Properties"]["Environment"]["Variables"]
    fits = aws_limits.LAMBDA_ENVIRONMENT_BYTES - aws_limits.environment_bytes(
        aws_limits.WorstCase(template, "Toolpipe").resolve(variables)
    )
    variables["TOOLPIPE_TRIGGER_INSTRUCTIONS"] += "x" * fits  # exactly 4 KB with a short stack name
    for stack, code in (("Toolpipe", 0), ("CustomerSupportAgentsProductionEuWest1", 1)):
        path = tmp_path / f"{stack}.template.json"
        path.write_text(json.dumps(template))
        assert main(["--template", str(path), "--checks", "aws-limits"]) == code, stack
    capsys.readouterr()
