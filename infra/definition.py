"""The state machine, defined once: the CDK stack ships it and the local runtime runs it.

Plain Amazon States Language (JSONPath: moto does not run JSONata) with two placeholders,
filled by CloudFormation `DefinitionSubstitutions` when deployed and by the local runtime
from the resources it created. Only ids and small statuses travel through it: the state
of an execution stays near 1 KB whatever the tools return (Step Functions caps it at
256 KiB and the history at 25,000 events).
"""

import json
from typing import Any

from infra import limits

ORCHESTRATOR_ARN = "OrchestratorFunctionArn"
TOOL_QUEUE_URL = "ToolQueueUrl"
SUBSTITUTIONS = (ORCHESTRATOR_ARN, TOOL_QUEUE_URL)

# How many tool calls of one turn run at once; the rest queue inside the Map.
MAX_PARALLEL_CALLS = 10

_LAMBDA_TRANSIENT = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
]


def _ref(name: str) -> str:
    return "${" + name + "}"


def build_definition() -> dict[str, Any]:
    orchestrator = _ref(ORCHESTRATOR_ARN)
    return {
        "Comment": "toolpipe: model step, tool calls fanned out over SQS, loop until a plain answer",
        "StartAt": "Start",
        # Ends with TIMED_OUT, which the execution-status rule turns into a failed run.
        "TimeoutSeconds": limits.EXECUTION_TIMEOUT_SECONDS,
        "States": {
            "Start": {
                "Type": "Pass",
                "Parameters": {"run_id.$": "$.run_id", "results": []},
                "Next": "CallModel",
            },
            "CallModel": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {
                    "FunctionName": orchestrator,
                    "Payload": {"action": "step", "run_id.$": "$.run_id", "results.$": "$.results"},
                },
                "ResultSelector": {"decision.$": "$.Payload"},
                "ResultPath": "$.model",
                "Retry": [
                    {
                        "ErrorEquals": _LAMBDA_TRANSIENT,
                        "IntervalSeconds": 2,
                        "MaxAttempts": 6,
                        "BackoffRate": 2,
                    },
                    # ModelCallError: the endpoint kept failing for the whole invocation.
                    {
                        "ErrorEquals": ["ModelCallError"],
                        "IntervalSeconds": 10,
                        "MaxAttempts": 2,
                        "BackoffRate": 3,
                    },
                ],
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "MarkFailed"}],
                "Next": "Route",
            },
            "Route": {
                "Type": "Choice",
                "Choices": [
                    {"Variable": "$.model.decision.status", "StringEquals": "tool_calls", "Next": "RunTools"}
                ],
                "Default": "Done",
            },
            "RunTools": {
                "Type": "Map",
                "ItemsPath": "$.model.decision.calls",
                "ItemSelector": {"run_id.$": "$.run_id", "call.$": "$$.Map.Item.Value"},
                "MaxConcurrency": MAX_PARALLEL_CALLS,
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "INLINE"},
                    "StartAt": "Dispatch",
                    "States": {
                        "Dispatch": {
                            "Type": "Task",
                            "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                            "Parameters": {
                                "QueueUrl": _ref(TOOL_QUEUE_URL),
                                "MessageBody": {
                                    "run_id.$": "$.run_id",
                                    "call_id.$": "$.call.call_id",
                                    "seq.$": "$.call.seq",
                                    "message_seq.$": "$.call.message_seq",
                                    "task_token.$": "$$.Task.Token",
                                },
                            },
                            "TimeoutSecondsPath": "$.call.timeout_seconds",
                            "HeartbeatSecondsPath": "$.call.heartbeat_seconds",
                            "Catch": [
                                {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "CallFailed"}
                            ],
                            "End": True,
                        },
                        # The worker crashed, timed out or went silent: the model reads an error
                        # result written by the next model step.
                        "CallFailed": {
                            "Type": "Pass",
                            "Parameters": {
                                "call_id.$": "$.call.call_id",
                                "status": "error",
                                "error.$": "$.error.Error",
                            },
                            "End": True,
                        },
                    },
                },
                "ResultPath": "$.results",
                "Next": "CallModel",
            },
            "MarkFailed": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {
                    "FunctionName": orchestrator,
                    "Payload": {"action": "fail", "run_id.$": "$.run_id", "error.$": "$.error"},
                },
                "ResultPath": None,
                "Retry": [{"ErrorEquals": _LAMBDA_TRANSIENT, "IntervalSeconds": 2, "MaxAttempts": 6}],
                "Next": "Failed",
            },
            "Failed": {
                "Type": "Fail",
                "Error": "RunFailed",
                "Cause": "the model step failed; see the run record",
            },
            "Done": {"Type": "Succeed"},
        },
    }


def definition_json() -> str:
    return json.dumps(build_definition(), indent=2, sort_keys=True)


def substitute(definition: str, values: dict[str, str]) -> str:
    """What CloudFormation does with `DefinitionSubstitutions`, for the local runtime."""
    missing = set(SUBSTITUTIONS) - set(values)
    if missing:
        raise ValueError(f"missing substitutions: {sorted(missing)}")
    for name, value in values.items():
        definition = definition.replace(_ref(name), value)
    return definition
