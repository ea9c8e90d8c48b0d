"""Assertions on the synthesized template."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Capture, Match

from toolpipe.infra.cdk import limits
from toolpipe.infra.cdk.definition import ORCHESTRATOR_ARN, TOOL_QUEUE_URL, definition_json
from toolpipe.infra.cdk.functions import FUNCTIONS, ORCHESTRATOR, TOOL_WORKER
from toolpipe.shared.history.retention import (
    RETAIN_UNTIL,
    RETENTION_TAG_KEY,
    RETENTION_TAG_VALUE,
    RUN_OBJECTS_PREFIX,
)

ROOT = Path(__file__).resolve().parents[2]


def _one(template: Any, kind: str) -> tuple[str, dict[str, Any]]:
    found = template.find_resources(kind)
    assert len(found) == 1, found
    return next(iter(found.items()))


def _history_table(template: Any) -> tuple[str, dict[str, Any]]:
    """The history table (the stack's other is the model's rate budgets)."""
    found = {
        k: v for k, v in template.find_resources("AWS::DynamoDB::Table").items() if k.startswith("History")
    }
    assert len(found) == 1, found
    return next(iter(found.items()))


def _logical(template: Any, kind: str, **props: Any) -> str:
    found = template.find_resources(kind, {"Properties": props} if props else None)
    assert len(found) == 1, found
    return next(iter(found))


def test_one_standard_state_machine_runs_the_shared_definition(template: Any) -> None:
    _, machine = _one(template, "AWS::StepFunctions::StateMachine")
    props = machine["Properties"]
    assert props["StateMachineType"] == "STANDARD"
    # Exactly the definition the local runtime executes.
    assert props["DefinitionString"] == definition_json()
    orchestrator = _logical(template, "AWS::Lambda::Function", Handler=ORCHESTRATOR.handler)
    queue = _logical(template, "AWS::SQS::Queue", RedrivePolicy=Match.any_value())
    assert props["DefinitionSubstitutions"] == {
        ORCHESTRATOR_ARN: {"Fn::GetAtt": [orchestrator, "Arn"]},
        TOOL_QUEUE_URL: {"Ref": queue},
    }
    assert props["TracingConfiguration"] == {"Enabled": True}
    assert props["LoggingConfiguration"]["Level"] == "ALL"
    assert props["LoggingConfiguration"]["IncludeExecutionData"] is False  # task tokens stay out of logs


def test_tool_queue_has_a_dlq_and_six_times_the_worker_timeout(template: Any) -> None:
    dlq = Capture()
    template.has_resource_properties(
        "AWS::SQS::Queue",
        {
            "VisibilityTimeout": limits.QUEUE_VISIBILITY_SECONDS,
            "RedrivePolicy": {"deadLetterTargetArn": {"Fn::GetAtt": [dlq, "Arn"]}, "maxReceiveCount": 3},
            "SqsManagedSseEnabled": True,
        },
    )
    assert dlq.as_string() in template.find_resources("AWS::SQS::Queue")
    template.has_resource_properties(
        "AWS::Lambda::Function",
        {"Handler": TOOL_WORKER.handler, "Timeout": limits.WORKER_TIMEOUT_SECONDS},
    )
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {"BatchSize": 1, "FunctionResponseTypes": ["ReportBatchItemFailures"]},
    )


def test_history_table_has_recovery_and_encryption(template: Any) -> None:
    _, table = _history_table(template)
    props = table["Properties"]
    assert props["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}
    assert table["DeletionPolicy"] == "Retain"


def test_ended_runs_expire_and_the_table_is_protected(template: Any) -> None:
    """Retention (docs/concepts/runs.md "Retention"): the table's TTL on the attribute the store stamps, a
    lifecycle rule for ended runs' objects (tagged when the run ends) and one for old input
    versions, all 30 days by default; deletion protection on the table."""
    _, table = _history_table(template)
    props = table["Properties"]
    assert props["TimeToLiveSpecification"] == {"AttributeName": RETAIN_UNTIL, "Enabled": True}
    assert props["DeletionProtectionEnabled"] is True
    contents = template.find_resources(
        "AWS::S3::Bucket", {"Properties": {"LifecycleConfiguration": Match.object_like({})}}
    )
    rules = {
        rule["Id"]: rule
        for bucket in contents.values()
        for rule in bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    }
    assert rules["EndedRunsExpire"] == {
        "Id": "EndedRunsExpire",
        "Prefix": RUN_OBJECTS_PREFIX,
        "TagFilters": [{"Key": RETENTION_TAG_KEY, "Value": RETENTION_TAG_VALUE}],
        "ExpirationInDays": 30,
        "Status": "Enabled",
    }
    assert rules["OldInputVersionsExpire"]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 30}
    [inputs] = [b for b in contents.values() if "OldInputVersionsExpire" in json.dumps(b)]
    assert inputs["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    for fn in template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Runtime": "python3.14"}}
    ).values():
        env = fn["Properties"].get("Environment", {}).get("Variables", {})
        if "TABLE_NAME" in env:  # every function that ends runs: the store stamps with it
            assert env["TOOLPIPE_RETENTION_DAYS"] == "30"


def test_retention_days_is_a_stack_option(tmp_path: Path) -> None:
    from aws_cdk.assertions import Template

    from toolpipe.infra.cdk.app import build_app

    app, _ = build_app(bundle=False, outdir=str(tmp_path), context={"retention_days": "7"})
    template = Template.from_json(app.synth().get_stack_by_name("Toolpipe").template)
    text = json.dumps(template.to_json())
    assert '"ExpirationInDays": 7' in text and '"NoncurrentDays": 7' in text
    assert '"TOOLPIPE_RETENTION_DAYS": "7"' in text and '"TOOLPIPE_RETENTION_DAYS": "30"' not in text
    for bad in ("0", "ten", "3651", "1.5"):
        with pytest.raises(ValueError, match="retention_days must be a whole number of days from 1 to 3650"):
            build_app(bundle=False, outdir=str(tmp_path / bad), context={"retention_days": bad})


def test_functions_share_one_code_asset_and_only_the_orchestrator_gets_openai(template: Any) -> None:
    functions = template.find_resources("AWS::Lambda::Function", {"Properties": {"Runtime": "python3.14"}})
    assert len(functions) >= 3
    assert len({json.dumps(f["Properties"]["Code"], sort_keys=True) for f in functions.values()}) == 1
    layers = {name: f["Properties"]["Layers"] for name, f in functions.items()}
    model_layer = _logical(
        template, "AWS::Lambda::LayerVersion", Description="openai (the orchestrator only)"
    )
    with_openai = [name for name, refs in layers.items() if {"Ref": model_layer} in refs]
    assert len(with_openai) == 1 and with_openai[0].startswith("Orchestrator")


def test_model_key_comes_from_secrets_manager_not_the_environment(template: Any) -> None:
    secret = _logical(
        template,
        "AWS::SecretsManager::Secret",
        Description="API key of the OpenAI-compatible model endpoint: put its value after deploying "
        "(aws secretsmanager put-secret-value --secret-id ARN --secret-string KEY).",
    )
    orchestrator = template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": ORCHESTRATOR.handler}}
    )
    env = next(iter(orchestrator.values()))["Properties"]["Environment"]["Variables"]
    assert env["OPENAI_API_KEY_SECRET_ARN"] == {"Ref": secret}
    assert "OPENAI_API_KEY" not in env


def test_the_model_key_is_retained_and_the_approval_signing_key_is_not(template: Any) -> None:
    """The model key holds what the deployer put: kept, like the table and bucket. The signing key
    was generated for this stack's links only: deleted with it (infra/cdk/constructs/functions.py)."""
    secrets = template.find_resources("AWS::SecretsManager::Secret")
    model_key = secrets["ModelApiKeyF7948A61"]
    assert (model_key["DeletionPolicy"], model_key["UpdateReplacePolicy"]) == ("Retain", "Retain")
    [signing_key] = [s for name, s in secrets.items() if name.startswith("ApprovalSigningKey")]
    assert (signing_key["DeletionPolicy"], signing_key["UpdateReplacePolicy"]) == ("Delete", "Delete")


def test_rest_api_is_iam_authorized_with_validated_parameters(template: Any) -> None:
    template.resource_count_is("AWS::ApiGateway::RestApi", 1)
    methods = template.find_resources("AWS::ApiGateway::Method")
    assert {m["Properties"]["HttpMethod"] for m in methods.values()} == {"POST", "GET", "HEAD", "DELETE"}
    # Every method but the approval page's, whose credential is the signed link (test_approval_links.py).
    signed = [m for m in methods.values() if m["Properties"]["AuthorizationType"] != "AWS_IAM"]
    assert len(signed) == 3 and {m["Properties"]["HttpMethod"] for m in signed} == {"GET", "HEAD", "POST"}
    assert all("RequestValidatorId" in m["Properties"] for m in methods.values())


def _states_actions(policy: dict[str, Any]) -> set[str]:
    return {
        action
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        for action in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])
        if action.startswith("states:")
    }


def test_state_machine_permissions_are_exactly_what_each_function_uses(template: Any) -> None:
    policies = template.find_resources("AWS::IAM::Policy")
    worker = next(p for name, p in policies.items() if name.startswith("ToolWorker"))
    # Answer its task; start a child run for an agent tool.
    assert _states_actions(worker) == {
        "states:SendTaskSuccess",
        "states:SendTaskFailure",
        "states:SendTaskHeartbeat",
        "states:StartExecution",
    }
    api = next(p for name, p in policies.items() if name.startswith("ApiServiceRole"))
    # Start a run; stop the executions of a cancelled run and its children; answer a call's
    # WaitForApproval task with a person's decision.
    assert _states_actions(api) == {
        "states:StartExecution",
        "states:StopExecution",
        "states:SendTaskSuccess",
        "states:SendTaskFailure",
    }
    orchestrator = next(p for name, p in policies.items() if name.startswith("OrchestratorServiceRole"))
    assert _states_actions(orchestrator) == set()
    # A child run's orchestrator answers its parent's task, and a long run's starts its next
    # execution, through a policy of its own; it reads an ended execution's history to count its
    # transitions (a run's cost), on this state machine's executions only.
    answers = next(p for name, p in policies.items() if name.startswith("OrchestratorAnswersParentTasks"))
    assert _states_actions(answers) == {
        "states:SendTaskSuccess",
        "states:SendTaskFailure",
        "states:SendTaskHeartbeat",
        "states:StartExecution",
        "states:GetExecutionHistory",
    }
    [history] = [
        s
        for s in answers["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "states:GetExecutionHistory"
    ]
    joined = json.dumps(history["Resource"])
    assert ":execution:" in joined and '"Ref": "RunFlow' in joined and joined.endswith('":*"]]}')


def test_cdk_nag_is_live() -> None:
    """A stack with a known finding must fail synthesis, or the clean synth above proves nothing."""
    from aws_cdk import App, Stack, Validations
    from aws_cdk import aws_sqs as sqs
    from cdk_nag import AwsSolutionsChecks

    app = App()
    stack = Stack(app, "Bad")
    sqs.Queue(stack, "NoDlqNoSsl")
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()


def _descendants(pid: int) -> list[list[str]]:
    """The command lines of the processes below `pid` (Linux's /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended meanwhile
            continue
        parent = int(text.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(text.split(" ", 1)[0]))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        try:
            found.append((Path("/proc") / str(child) / "cmdline").read_bytes().decode().split("\0"))
        except OSError:
            continue
        todo.extend(children.get(child, []))
    return found


OUR_JSII_NODE = str(ROOT / "infra" / "cdk" / "jsii-node")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the processes from Linux's /proc")
@pytest.mark.skipif(
    os.environ["JSII_NODE"] != OUR_JSII_NODE, reason="a JSII_NODE of the developer's own wins over ours"
)
def test_the_cdks_node_runs_on_the_flags_that_cut_a_synthesis(template: Any) -> None:
    """The syntheses of the tests and of `make synth` and `make check-deploy` run the CDK's Node
    with infra/cdk/jsii-node's flags, ~0.6x the CPU: this process's jsii runtime and the kernel it
    started hold them (jsii passes its own flags on), and the Makefile names the same file."""
    scripts = ("/bin/jsii-runtime.js", "/lib/program.js")  # the runtime, and the kernel it starts
    kernels = [argv for argv in _descendants(os.getpid()) if any(a.endswith(scripts) for a in argv)]
    assert len(kernels) >= 2, kernels
    for argv in kernels:
        assert {"--liftoff-only", "--single-threaded-gc"} <= set(argv), argv
    assert "export JSII_NODE ?= $(CURDIR)/infra/cdk/jsii-node\n" in (ROOT / "Makefile").read_text()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("npx") is None, reason="node is needed for the CDK CLI")
def test_cdk_cli_synthesizes_offline(tmp_path: Path) -> None:
    cdk = ROOT / "node_modules" / ".bin" / "cdk"
    assert cdk.exists(), "run `make install` first: the CDK CLI comes from package.json"
    env = {**os.environ, "TOOLPIPE_BUNDLE": "0", "CDK_DISABLE_VERSION_CHECK": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    result = subprocess.run(
        [str(cdk), "synth", "--quiet", "--no-notices", "-o", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    template = json.loads((tmp_path / "Toolpipe.template.json").read_text())
    kinds = [r["Type"] for r in template["Resources"].values()]
    assert kinds.count("AWS::StepFunctions::StateMachine") == 1
    # Tool calls, their DLQ, the execution-ended rule's DLQ, the triggers' DLQ.
    assert kinds.count("AWS::SQS::Queue") == 4
    assert kinds.count("AWS::Events::Rule") == 2  # execution ended; RunRequested
    assert kinds.count("AWS::DynamoDB::Table") == 2  # the history; the model's rate budgets
    assert kinds.count("AWS::Lambda::Function") >= 2
    assert kinds.count("AWS::ApiGateway::RestApi") == 1


@pytest.mark.skipif(shutil.which("npx") is None, reason="node is needed for the CDK CLI")
def test_the_cdk_cli_the_tests_run_sends_no_telemetry() -> None:
    """The CDK CLI sends usage telemetry to AWS after its commands (2.1100 and later) unless
    told not to: the suite tells it (tests/conftest.py, as the Makefile does for its targets)."""
    cdk = ROOT / "node_modules" / ".bin" / "cdk"
    assert cdk.exists(), "run `make install` first: the CDK CLI comes from package.json"
    status = subprocess.run(
        [str(cdk), "cli-telemetry", "--status"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert status.returncode == 0, status.stderr
    assert "CLI Telemetry is disabled" in status.stdout + status.stderr


def test_the_gateway_validates_no_body_so_aws_answers_as_the_local_runtime(template: Any) -> None:
    """The local runtime has no API Gateway in front of the API function: a body the gateway
    refused would get `Invalid request body` on AWS and the function's field-level 400 locally.
    So the function is the one validator of bodies, and the gateway checks only what the local
    router always supplies too: a method's path parameters."""
    assert not template.find_resources("AWS::ApiGateway::Model")
    validators = template.find_resources("AWS::ApiGateway::RequestValidator")
    assert validators and all(v["Properties"]["ValidateRequestBody"] is False for v in validators.values())
    resources = template.find_resources("AWS::ApiGateway::Resource")

    def path_parameters(resource: dict[str, Any]) -> set[str]:
        """The `{name}` parts of a resource's whole path, its parents' included."""
        found: set[str] = set()
        while resource:
            part = resource["Properties"]["PathPart"]
            if part.startswith("{"):
                found.add(f"method.request.path.{part.strip('{}+')}")
            resource = resources.get(resource["Properties"]["ParentId"].get("Ref", ""), {})
        return found

    checked = 0
    for method in template.find_resources("AWS::ApiGateway::Method").values():
        props = method["Properties"]
        assert "RequestModels" not in props
        resource = resources.get(props["ResourceId"].get("Ref", ""), {})
        in_path = path_parameters(resource) if resource else set()
        required = {name for name, needed in props.get("RequestParameters", {}).items() if needed}
        # Required: exactly the path's parameters (`/runs/{run_id}/events/{seq}`: both).
        assert required == in_path, (resource.get("Properties", {}).get("PathPart"), required, in_path)
        checked += bool(in_path)
    assert checked >= 5


def test_an_execution_that_ends_badly_is_handed_to_the_orchestrator(template: Any) -> None:
    """Stopped by hand, timed out or failed outside its own Catch: the run must not stay running."""
    from toolpipe.infra.cdk.definition import execution_ended_request

    machine = _logical(template, "AWS::StepFunctions::StateMachine")
    orchestrator = _logical(template, "AWS::Lambda::Function", Handler=ORCHESTRATOR.handler)
    rule_id, rule = next(
        (name, r)
        for name, r in template.find_resources("AWS::Events::Rule").items()
        if r["Properties"]["EventPattern"]["source"] == ["aws.states"]
    )
    props = rule["Properties"]
    assert props["EventPattern"] == {
        "source": ["aws.states"],
        "detail-type": ["Step Functions Execution Status Change"],
        "detail": {
            "stateMachineArn": [{"Ref": machine}],
            "status": ["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"],
        },
    }
    [target] = props["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [orchestrator, "Arn"]}
    # The transformer's output, applied to an event, is the request the local runtime sends.
    transformer = target["InputTransformer"]
    event = {
        "detail": {
            "name": "run-1--2",
            "status": "TIMED_OUT",
            "stateMachineArn": "arn",
            "executionArn": "arn:x",
        }
    }
    rendered = transformer["InputTemplate"]
    for placeholder, path in transformer["InputPathsMap"].items():
        value = event
        for key in path.removeprefix("$.").split("."):
            value = value[key]
        rendered = rendered.replace(f"<{placeholder}>", json.dumps(value))
    assert json.loads(rendered) == execution_ended_request(event)
    assert json.loads(rendered) == {
        "action": "execution_ended",
        "execution": "run-1--2",
        "status": "TIMED_OUT",
        "execution_arn": "arn:x",
    }
    # Undelivered events are kept, not lost.
    dlq = target["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]
    assert template.find_resources("AWS::SQS::Queue")[dlq]["Properties"]["SqsManagedSseEnabled"] is True
    assert target["RetryPolicy"]["MaximumRetryAttempts"] > 0
    template.has_resource_properties(
        "AWS::Lambda::Permission",
        {
            "Action": "lambda:InvokeFunction",
            "FunctionName": {"Fn::GetAtt": [orchestrator, "Arn"]},
            "Principal": "events.amazonaws.com",
            "SourceArn": {"Fn::GetAtt": [rule_id, "Arn"]},
        },
    )


# The ids the stack's resources had when it was one construct (before infra/cdk/constructs/).
# CloudFormation replaces a resource whose id changes: the retained table, bucket and secret
# would be orphaned and new, empty ones made. Only Lambda permissions and the event source
# mapping changed id in the split (CDK names them after their targets' full paths).
DEPLOYED_IDS = {
    "HistoryC127576E",
    "ContentsE890674E",
    "ModelApiKeyF7948A61",
    "ToolCallsD9D4B760",
    "ToolDeadLetters4A9E45FE",
    "ExecutionEndedDeadLetters38BFD48E",
    "ExecutionEndedCD26BCE0",
    "RunFlowD6B0121A",
    "RunFlowRole14A27685",
    "RunFlowLogs9C51F68C",
    "Orchestrator6EF1216F",
    "OrchestratorAnswersParentTasksBED89DE7",
    "ToolWorkerD2951D5C",
    "ApiF70053CD",
    "ApiServiceRole1BD550DA",
    "Dependencies1F4ECB40",
    "ModelClient5FB5F3CA",
    "RunsApiED2ADE92",
    "RunsApiDeploymentStagev1FC2C1700",
    "ApiAccessLogsE9DF007D",
}


def test_the_stack_keeps_the_logical_ids_it_was_deployed_with(template: Any) -> None:
    resources = template.to_json()["Resources"]
    assert set(resources) >= DEPLOYED_IDS, sorted(DEPLOYED_IDS - set(resources))
    assert set(template.to_json()["Outputs"]) >= {"ApiUrl", "StateMachineArn", "TableName"}


def test_each_function_deploys_as_its_spec_says(template: Any) -> None:
    """The handler, timeout and memory the CLI and the local runtime use are what deploys."""
    deployed = {
        f["Properties"]["Handler"]: f["Properties"]
        for f in template.find_resources(
            "AWS::Lambda::Function", {"Properties": {"Runtime": "python3.14"}}
        ).values()
    }
    assert set(deployed) == {spec.handler for spec in FUNCTIONS.values()}
    for spec in FUNCTIONS.values():
        assert (deployed[spec.handler]["Timeout"], deployed[spec.handler]["MemorySize"]) == (
            spec.timeout_seconds,
            spec.memory_mb,
        )


def test_logical_ids_are_made_from_the_element_path_alone() -> None:
    """The ids under the stack, less the flattened scopes' (the pipeline and its components),
    read from the path: asking jsii for each scope made synthesis ~4x slower."""
    from toolpipe.infra.cdk.stack import kept_ids

    flattened = {"Toolpipe/Pipeline", "Toolpipe/Pipeline/Storage"}
    assert kept_ids("Toolpipe", "Toolpipe/Pipeline/Storage/History/Resource", flattened) == [
        "History",
        "Resource",
    ]
    # Only the scope with that whole path is flattened: an id of the same name deeper is kept.
    assert kept_ids("Toolpipe", "Toolpipe/Pipeline/RunEvents/Storage/Bus", flattened) == [
        "RunEvents",
        "Storage",
        "Bus",
    ]
    assert kept_ids("Toolpipe", "Toolpipe/ApiUrl", flattened) == ["ApiUrl"]
    assert kept_ids("My/Stack", "My/Stack/Pipeline/X", {"My/Stack/Pipeline"}) == ["X"]
