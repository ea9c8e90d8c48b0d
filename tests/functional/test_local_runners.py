"""A runner per trust boundary (issue 32, item 3), locally: the example's template has a "mail"
runner beside the default one, each its own function and role, and the local IAM check holds
each tool to its own runner's role. The worker invokes the function of the runner a tool names,
and answers a clear error for a runner the deployment does not have."""

from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.conftest import Pipeline, call
from tests.functional.test_local_roles import _as, _refused
from toolpipe import tool
from toolpipe.infra.cdk.functions import TOOL_RUNNER, TOOL_WORKER, runner_spec
from toolpipe.infra.local.runtime import EMAIL_SENDER, REGION
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, Agent

MAIL = runner_spec("mail")


def _send() -> Any:
    return boto3.client("ses", region_name=REGION).send_email(
        Source=EMAIL_SENDER,
        Destination={"ToAddresses": [EMAIL_SENDER]},
        Message={"Subject": {"Data": "s"}, "Body": {"Text": {"Data": "b"}}},
    )


def _sent_or_refused(send: Callable[[], Any]) -> str:
    try:
        send()
    except ClientError as e:
        return f"refused: {e.response['Error']['Code']}"
    return "sent"


@tool
def mail_from_default() -> str:
    """Send a mail from the default runner."""
    return _sent_or_refused(_send)


@tool(runner="mail")
def mail_from_mail() -> str:
    """Send a mail from the mail runner."""
    return _sent_or_refused(_send)


@tool(runner="files")
def read_files() -> str:
    """A tool of a runner the example's stack does not deploy."""
    return "ran"


RUNNERS = Agent(
    name="runners",
    instructions="You send mail.",
    tools=[mail_from_default, mail_from_mail, read_files],
    max_iterations=3,
)


@pytest.fixture(autouse=True)
def agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(AGENTS, RUNNERS.name, RUNNERS)


def test_each_runner_is_its_own_function_and_role_and_only_mails_may_send(pipeline: Pipeline) -> None:
    runtime = pipeline.runtime
    default, mail = runtime.functions[TOOL_RUNNER.name], runtime.functions[MAIL.name]
    assert default.policy.role_arn != mail.policy.role_arn
    assert runtime.deployment.function_arns[TOOL_RUNNER.name] != runtime.deployment.function_arns[MAIL.name]
    # The SES grant (examples/assistant/cdk_app.py) is the mail runner's alone.
    message = _refused(runtime, TOOL_RUNNER.name, _send)
    assert "ses:SendEmail" in message and "ToolRunnerServiceRole" in message
    assert _as(runtime, MAIL.name, _send)["MessageId"]
    # Nor may the default runner have the mail runner send for it: no runner invokes another.
    functions = boto3.client("lambda", region_name=REGION)
    arns = runtime.deployment.function_arns
    _refused(runtime, TOOL_RUNNER.name, lambda: functions.invoke(FunctionName=arns[MAIL.name], Payload=b"{}"))
    _refused(runtime, MAIL.name, lambda: functions.invoke(FunctionName=arns[TOOL_RUNNER.name], Payload=b"{}"))
    # Besides the grant, a named runner has what the default one has: a long answer's prefix only.
    s3 = boto3.client("s3", region_name=REGION)
    bucket = runtime.deployment.bucket
    _as(runtime, MAIL.name, lambda: s3.put_object(Bucket=bucket, Key="tool-results/abc", Body=b"x"))
    _refused(runtime, MAIL.name, lambda: s3.get_object(Bucket=bucket, Key="tool-results/abc"))
    _refused(runtime, MAIL.name, lambda: s3.put_object(Bucket=bucket, Key="runs/r/x", Body=b"x"))


def test_the_worker_runs_each_tool_in_its_runner_and_refuses_an_undeployed_one(pipeline: Pipeline) -> None:
    assert pipeline.runtime.functions[TOOL_WORKER.name].environment["TOOLPIPE_TOOL_RUNNERS"]
    pipeline.script(
        Reply(tool_calls=[call("mail_from_default"), call("mail_from_mail"), call("read_files")]),
        Reply(content="done"),
    )
    run_id = pipeline.start("mail", agent="runners")
    body = pipeline.finish(run_id)
    assert body["run"]["status"] == "succeeded"
    results = [m["content"] for m in body["messages"] if m["kind"] == "tool_result"]
    assert results[0] == "refused: AccessDenied"
    assert results[1] == "sent"
    # Never run in the default runner instead: its role is not the one the tool was granted.
    assert results[2] == (
        "Error: Tool 'read_files' was not run: it runs in runner 'files', which this deployment "
        "does not have (ToolPipeline(..., runners=[...])). It had no effect."
    )
