"""`make check-deploy` (infra/cdk/deploy_checks.py): it passes on the synthesized template, and fails,
with one line naming the cause, on templates broken in ways AWS refuses at create time. The real
validators run (asl-validator on package.json's Node, cfn-lint), on small files."""

import json
import re
from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.cdk import deploy_checks
from toolpipe.infra.cdk.definition import loop_states
from toolpipe.infra.cdk.deploy_checks import STATE_MACHINE, main

ASL = "asl-rules,asl-validator"
pytestmark = pytest.mark.skipif(
    not (deploy_checks.NODE_BIN / "asl-validator").exists(),
    reason="run `make install`: asl-validator is from npm",
)


def _gate(path: Path, checks: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], list[str]]:
    code = main(["--template", str(path), "--checks", checks])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


@pytest.fixture(scope="module")
def machine(template: Any) -> dict[str, Any]:
    """The state machine of the synthesized template, with the resources its definition names
    (by type only: all the checks need to render it), as a template of its own."""
    resources = template.to_json()["Resources"]
    machine_id, resource = next((k, r) for k, r in resources.items() if r["Type"] == STATE_MACHINE)
    named = json.dumps(resource["Properties"]["DefinitionSubstitutions"])
    others = {k: {"Type": r["Type"]} for k, r in resources.items() if f'"{k}"' in named}
    return {
        "Resources": {machine_id: {"Type": STATE_MACHINE, "Properties": resource["Properties"]}, **others}
    }


def _broken(machine: dict[str, Any], tmp_path: Path, change: Any) -> Path:
    """The state machine's template with its definition changed by `change(definition)`."""
    template = json.loads(json.dumps(machine))
    props = next(r for r in template["Resources"].values() if r["Type"] == STATE_MACHINE)["Properties"]
    definition = json.loads(props["DefinitionString"])
    change(definition)
    props["DefinitionString"] = json.dumps(definition)
    path = tmp_path / "template.json"
    path.write_text(json.dumps(template))
    return path


@pytest.mark.slow
def test_the_gate_passes_on_the_synthesized_template(
    template: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "Toolpipe.template.json"
    path.write_text(json.dumps(template.to_json()))
    # checkov (~20 s here) runs in `make check-deploy`, which `make test` runs first.
    checks = f"{ASL},cfn-lint"
    code, out, err = _gate(path, checks, capsys)
    assert code == 0, err
    assert [line.split()[:2] for line in out[:-1]] == [[name, "pass"] for name in checks.split(",")]
    assert out[-1].startswith(f"check-deploy: {len(checks.split(','))} checks passed")


@pytest.mark.slow
def test_a_state_name_used_twice_fails_the_gate_with_one_line_naming_it(
    machine: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The defect of issue 17: two Maps each with a `Dispatch`. moto runs it; AWS refuses it."""

    def rename(definition: dict[str, Any]) -> None:
        processor = loop_states(definition)["RunGatedTools"]["ItemProcessor"]
        text = json.dumps(processor).replace('"GatedDispatch"', '"Dispatch"')
        loop_states(definition)["RunGatedTools"]["ItemProcessor"] = json.loads(text)

    code, out, err = _gate(_broken(machine, tmp_path, rename), ASL, capsys)
    assert code == 1
    assert len(err) == 1 and "'Dispatch'" in err[0] and "DUPLICATE_STATE_NAME" in err[0], err
    # The npm validator refuses it too, on its own.
    assert out[1].startswith("asl-validator  FAIL") and "Dispatch" in out[1], out


def _next_to_nowhere(definition: dict[str, Any]) -> None:
    definition["States"]["Start"]["Next"] = "CallTheModel"


def _long_name(definition: dict[str, Any]) -> None:
    long = "WaitForTheToolResultAfterThePersonApprovedTheCallThroughTheSignedLinkInTheirEmail"
    assert len(long) == 81
    text = json.dumps(definition).replace('"Done"', f'"{long}"')
    definition.clear()
    definition.update(json.loads(text))


def _unreachable(definition: dict[str, Any]) -> None:
    definition["States"]["Forgotten"] = {"Type": "Pass", "End": True}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "named"),
    [
        (_next_to_nowhere, "'CallTheModel'"),
        (_long_name, "81 characters"),
        (_unreachable, "'Forgotten'"),
    ],
    ids=["next-to-a-missing-state", "name-over-80-characters", "unreachable-state"],
)
def test_a_definition_aws_refuses_fails_the_gate(
    machine: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, named: str
) -> None:
    code, out, err = _gate(_broken(machine, tmp_path, change), ASL, capsys)
    assert code == 1
    assert len(err) == 1 and err[0].startswith("check-deploy: asl-rules failed:") and named in err[0], err
    assert [line.split()[:2] for line in out] == [["asl-rules", "FAIL"], ["asl-validator", "FAIL"]], out


@pytest.mark.slow
@pytest.mark.parametrize("where", ["leaves-a-map", "cycle-off-the-start"])
def test_our_rules_catch_what_asl_validator_passes(
    machine: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """Measured with asl-validator 4.0.0: a Map processor state going to a state outside the
    processor, and states reachable only from each other, pass it. AWS refuses both."""

    def change(definition: dict[str, Any]) -> None:
        if where == "leaves-a-map":
            failed = loop_states(definition)["RunTools"]["ItemProcessor"]["States"]["CallFailed"]
            del failed["End"]
            failed["Next"] = "Done"
        else:
            # The loop's branch starts at its end: the cycle through CallModel is reached from nowhere.
            definition["States"]["RunWithin"]["Branches"][0]["StartAt"] = "Ended"

    code, out, err = _gate(_broken(machine, tmp_path, change), ASL, capsys)
    assert code == 1
    assert out[0].startswith("asl-rules      FAIL") and out[1].startswith("asl-validator  pass"), out
    assert ("'CallFailed'" if where == "leaves-a-map" else "'CallModel'") in err[0], err


LAMBDA = {
    "Type": "AWS::Lambda::Function",
    "Properties": {
        "Code": {"ZipFile": "def handler(event, context): ..."},
        "Handler": "index.handler",
        "Runtime": "python3.12",
        "Role": "arn:aws:iam::123456789012:role/toolpipe",
        "MemorySize": 1024,
    },
}
QUEUE = {"Type": "AWS::SQS::Queue", "Properties": {"VisibilityTimeout": 900}}


def test_the_small_resources_below_pass_cfn_lint_as_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """So that in the next test the one changed value is what fails the gate."""
    path = tmp_path / "template.json"
    path.write_text(json.dumps({"Resources": {"Function": LAMBDA, "Queue": QUEUE}}))
    code, out, err = _gate(path, "cfn-lint", capsys)
    assert code == 0, err
    assert out[0] == "cfn-lint       pass  0 errors, 0 warnings", out


@pytest.mark.parametrize(
    ("resource", "key", "refused"),
    # (cfn-lint 1.58 leaves a Lambda's MemorySize unbounded above: Lambda Managed Instances.)
    [(LAMBDA, "Timeout", 1000), (LAMBDA, "MemorySize", 64), (QUEUE, "VisibilityTimeout", 50_000)],
    ids=["lambda-timeout-over-900-s", "lambda-memory-under-128-mb", "sqs-visibility-over-12-hours"],
)
def test_a_resource_cloudformation_refuses_fails_the_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], resource: dict[str, Any], key: str, refused: int
) -> None:
    broken = json.loads(json.dumps(resource))
    broken["Properties"][key] = refused
    path = tmp_path / "template.json"
    path.write_text(json.dumps({"Resources": {"Thing": broken}}))
    code, _, err = _gate(path, "cfn-lint", capsys)
    assert code == 1
    assert len(err) == 1 and err[0].startswith("check-deploy: cfn-lint failed: 1 error(s): E"), err
    assert f"Resources/Thing/Properties/{key}: {refused} is" in err[0], err


def test_every_checkov_skip_says_why(template: Any) -> None:
    """Skips are stated on the resource (infra/cdk/constructs/nag.py `skip_checkov`), with a reason."""
    skips = [
        (name, skip)
        for name, resource in template.to_json()["Resources"].items()
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    ]
    assert skips
    for name, skip in skips:
        assert skip["id"].startswith("CKV_AWS_") and len(skip["comment"]) >= 40, (name, skip)


# Skipped only on a resource the default stack does not make: the alarm topic of
# `-c alarm_topic_arn=create` (held by tests/infra/test_quotas_and_alarms.py).
OPTIONAL_SKIPS = {"CKV_AWS_26"}


def test_the_docs_list_every_checkov_skip(template: Any) -> None:
    """docs/operations/deploy.md "What the stack holds" has one row per check the template skips,
    and no other."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "operations" / "deploy.md").read_text(
        encoding="utf-8"
    )
    table = page.split("| checkov check | skipped on | why |", 1)[1].split("\n\n", 1)[0]
    listed = re.findall(r"^\| `(CKV_AWS_\d+)`", table, re.MULTILINE)
    assert len(listed) == len(set(listed))
    assert set(listed) == set(deploy_checks.checkov_skips(template.to_json())) | OPTIONAL_SKIPS


def test_an_ended_execution_the_orchestrator_fails_on_is_kept_not_dropped(template: Any) -> None:
    """The fix behind checkov's CKV_AWS_116 on the orchestrator: the execution-ended rule invokes
    it asynchronously; after Lambda's retries a failure goes to the rule's dead-letter queue."""
    from toolpipe.infra.cdk.functions import ORCHESTRATOR

    resources = template.to_json()["Resources"]
    orchestrator = next(
        k for k, r in resources.items() if r.get("Properties", {}).get("Handler") == ORCHESTRATOR.handler
    )
    queue = next(k for k in resources if k.startswith("ExecutionEndedDeadLetters"))
    configs = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::Lambda::EventInvokeConfig"
        and r["Properties"]["FunctionName"] == {"Ref": orchestrator}
    ]
    assert len(configs) == 1
    assert configs[0]["MaximumRetryAttempts"] == 2
    assert configs[0]["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": [queue, "Arn"]}


def test_a_definition_joined_from_references_is_rendered_with_well_formed_arns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """CDK writes a definition that names resources as an `Fn::Join` of strings, `Ref`s and
    `Fn::GetAtt`s: the validators see it joined, with ARNs where AWS will put them."""
    start = '{"StartAt": "Call", "States": {"Call": {"Type": "Task", "Resource": "arn:'
    parts = [start, {"Ref": "AWS::Partition"}, ':states:::lambda:invoke", "Parameters": {"FunctionName": "']
    parts += [{"Fn::GetAtt": ["Worker", "Arn"]}, '"}, "Next": "Send"}, "Send": {"Type": "Task", "Resource": ']
    parts += ['"arn:aws:states:::sqs:sendMessage", "Parameters": {"QueueUrl": "${Queue}"}, "End": true}}}']
    template = {
        "Resources": {
            "Machine": {
                "Type": STATE_MACHINE,
                "Properties": {
                    "DefinitionString": {"Fn::Join": ["", parts]},
                    "DefinitionSubstitutions": {"Queue": {"Ref": "Calls"}},
                },
            },
            "Worker": {"Type": "AWS::Lambda::Function"},
            "Calls": {"Type": "AWS::SQS::Queue"},
        }
    }
    states = deploy_checks.definitions(template)["Machine"]["States"]
    assert states["Call"]["Resource"] == "arn:aws:states:::lambda:invoke"
    assert (
        states["Call"]["Parameters"]["FunctionName"]
        == "arn:aws:lambda:us-east-1:123456789012:function:Worker"
    )
    assert (
        states["Send"]["Parameters"]["QueueUrl"] == "https://sqs.us-east-1.amazonaws.com/123456789012/Calls"
    )
    path = tmp_path / "template.json"
    path.write_text(json.dumps(template))
    code, out, err = _gate(path, ASL, capsys)
    assert code == 0, err
    assert [line.split()[:2] for line in out[:-1]] == [["asl-rules", "pass"], ["asl-validator", "pass"]]


def test_a_cdk_nag_finding_is_one_line_naming_the_rule_and_the_construct(tmp_path: Path) -> None:
    """From the validation report CDK writes beside the assembly (its format, as cdk-nag 3 wrote it)."""
    report = tmp_path / "validation-report.json"
    violation = {"constructPath": "Toolpipe/Bad/Resource", "constructFqn": "aws-cdk-lib.aws_sqs.CfnQueue"}
    report.write_text(
        json.dumps(
            {
                "title": "Validation Report",
                "pluginReports": [
                    {
                        "pluginName": "AwsSolutions",
                        "conclusion": "failure",
                        "violations": [
                            {"ruleName": "AwsSolutions-SQS3", "violatingConstructs": [violation]},
                            {"ruleName": "AwsSolutions-SQS4", "violatingConstructs": [violation]},
                        ],
                    }
                ],
            }
        )
    )
    reason = deploy_checks._nag_reason(report, "ValidationFailed: Validation failed.")
    assert reason == "2 unacknowledged finding(s): AwsSolutions-SQS3 at Toolpipe/Bad/Resource"


def test_each_checkov_reason_holds_for_what_the_template_holds(template: Any) -> None:
    """The reasons are read by reviewers: one that claims what the stack does not do is worse than
    the finding (issue 30: three did)."""
    resources = template.to_json()["Resources"]
    skips = deploy_checks.checkov_skips(template.to_json())

    def reasons(check: str, logical_prefix: str) -> list[str]:
        return [r for r, ids in skips[check].items() if any(i.startswith(logical_prefix) for i in ids)]

    # The tool runner's log group receives tool code's own output: no "no payloads" promise there.
    [runner_logs] = reasons("CKV_AWS_158", "ToolRunnerLogs")
    assert "no prompts" not in runner_logs and "Tool code's own output" in runner_logs
    # The contents bucket is also read through the API's presigned URLs.
    [contents] = reasons("CKV_AWS_18", "Contents")
    assert "presigned GET URL" in contents and "Only toolpipe's own functions read" not in contents
    # The runner's cap is the workers' event source's, as the template sets it.
    [runner] = reasons("CKV_AWS_115", "ToolRunner")
    [mapping] = [r for r in resources.values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    cap = mapping["Properties"]["ScalingConfig"]["MaximumConcurrency"]
    assert f"as the workers do: {cap} (" in runner
