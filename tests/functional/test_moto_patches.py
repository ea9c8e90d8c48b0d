"""moto's Step Functions interpreter, patched by the local runtime: cached clients and JSONPath
parsers (the e2e suite runs the state machine through them), and the early-answer race."""

import boto3
from moto import mock_aws
from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackEndpoint, CallbackOutcomeSuccess
from moto.stepfunctions.parser.asl.utils import boto_client, json_path

from infra.local import moto_patches

moto_patches.install()


def test_a_heartbeat_sent_before_the_task_starts_its_clock_is_accepted() -> None:
    # A worker woken by the send heartbeats at once, before the task reached its wait.
    assert CallbackEndpoint("token").notify_heartbeat()


def test_an_answer_that_arrives_before_the_heartbeat_clock_ends_the_wait_at_once() -> None:
    endpoint = CallbackEndpoint("token")
    endpoint.notify(CallbackOutcomeSuccess(callback_id="token", output="{}"))
    heartbeat = endpoint.setup_heartbeat_endpoint(heartbeat_seconds=2)
    # Unpatched, this waits the whole heartbeat timeout and reports it timed out.
    assert heartbeat.clear_and_wait()


def test_the_interpreter_builds_one_client_per_service_and_region() -> None:
    with mock_aws():
        first = boto_client.boto_client_for("us-east-1", "sqs")
        assert first is boto_client.boto_client_for("us-east-1", "sqs")
        assert first is not boto_client.boto_client_for("us-east-1", "lambda")
        queue = boto3.client("sqs", region_name="us-east-1").create_queue(QueueName="q")["QueueUrl"]
        first.send_message(QueueUrl=queue, MessageBody="through the cached client")
        assert boto3.client("sqs", region_name="us-east-1").receive_message(QueueUrl=queue)["Messages"]


def test_a_jsonpath_expression_is_parsed_once_and_still_evaluates() -> None:
    assert json_path.parse("$.call.seq") is json_path.parse("$.call.seq")
    assert json_path.extract_json("$.call.seq", {"call": {"seq": 7}}) == 7
