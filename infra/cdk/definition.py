"""The state machine, defined once: the CDK stack ships it and the local runtime runs it.

Plain Amazon States Language (JSONPath: moto does not run JSONata) with two placeholders,
filled by CloudFormation `DefinitionSubstitutions` when deployed and by the local runtime
from the resources it created. Only ids and small statuses travel through it: the state
of an execution stays near 1 KB whatever the tools return (Step Functions caps it at
256 KiB and the history at 25,000 events).
"""

import json
from typing import Any

from toolpipe.infra.cdk import limits
from toolpipe.shared.settings import WAITING_CALLS_PER_TURN

ORCHESTRATOR_ARN = "OrchestratorFunctionArn"
TOOL_QUEUE_URL = "ToolQueueUrl"
SUBSTITUTIONS = (ORCHESTRATOR_ARN, TOOL_QUEUE_URL)

# How many tool calls of one turn run at once; the rest queue inside the Map.
MAX_PARALLEL_CALLS = 10

# The loop's branch ends with this error when the run ended (the execution succeeds), the
# timer's with the other when the run's deadline passed.
RUN_ENDED = "RunEnded"
MAX_DURATION_REACHED = "MaxDurationReached"

_LAMBDA_TRANSIENT = [
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
]


# The EventBridge rule on this state machine's execution status changes, described once: the
# stack builds the rule from it and the local runtime applies it to the events it emits.
# Every ending reaches the orchestrator, which counts the execution's state transitions into its
# run (shared/costs/transitions.py). An execution that ends FAILED, TIMED_OUT or ABORTED may have
# ended where no state of its own could record it (stopped by hand, the whole execution timed
# out): the orchestrator also fails the run.
EXECUTION_ENDED_SOURCE = "aws.states"
EXECUTION_ENDED_DETAIL_TYPE = "Step Functions Execution Status Change"
EXECUTION_ENDED_STATUSES = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")
EXECUTION_ENDED_ACTION = "execution_ended"
# Request field -> path in the event, as the rule's input transformer reads it.
EXECUTION_ENDED_PATHS = {
    "execution": "$.detail.name",
    "status": "$.detail.status",
    "execution_arn": "$.detail.executionArn",
}


def execution_ended_pattern(state_machine_arn: str) -> dict[str, Any]:
    return {
        "source": [EXECUTION_ENDED_SOURCE],
        "detail-type": [EXECUTION_ENDED_DETAIL_TYPE],
        "detail": {"stateMachineArn": [state_machine_arn], "status": list(EXECUTION_ENDED_STATUSES)},
    }


def matches(pattern: dict[str, Any], event: dict[str, Any]) -> bool:
    """EventBridge matching for the patterns above: every field's value is one of those listed."""
    for name, wanted in pattern.items():
        value = event.get(name)
        if isinstance(wanted, dict):
            if not isinstance(value, dict) or not matches(wanted, value):
                return False
        elif value not in wanted:
            return False
    return True


def execution_ended_request(event: dict[str, Any]) -> dict[str, Any]:
    """What the rule's input transformer makes of `event`: the orchestrator's request."""
    request: dict[str, Any] = {"action": EXECUTION_ENDED_ACTION}
    for name, path in EXECUTION_ENDED_PATHS.items():
        value: Any = event
        for key in path.removeprefix("$.").split("."):
            value = value[key]
        request[name] = value
    return request


def _ref(name: str) -> str:
    return "${" + name + "}"


def _dispatch(failed: str) -> dict[str, Any]:
    return {
        "Type": "Task",
        "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
        "Parameters": {
            "QueueUrl": _ref(TOOL_QUEUE_URL),
            "MessageBody": {
                "run_id.$": "$.run_id",
                "seq.$": "$.call.seq",
                "message_seq.$": "$.call.message_seq",
                "task_token.$": "$$.Task.Token",
            },
        },
        "TimeoutSecondsPath": "$.call.timeout_seconds",
        "HeartbeatSecondsPath": "$.call.heartbeat_seconds",
        "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": failed}],
        "End": True,
    }


def _call_failed() -> dict[str, Any]:
    # The worker crashed, timed out or went silent: the model reads an error result written by
    # the next model step.
    return {
        "Type": "Pass",
        "Parameters": {"seq.$": "$.call.seq", "status": "error", "error.$": "$.error.Error"},
        "End": True,
    }


def _wait_for_approval(orchestrator: str) -> dict[str, Any]:
    """The orchestrator stores the approval with this task's token and returns; the task then
    waits until a person's decision answers the token (`POST /approvals/{id}/approve|deny`)
    or its timeout, from the orchestrator's settings, passes."""
    return {
        "Type": "Task",
        "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
        "Parameters": {
            "FunctionName": orchestrator,
            "Payload": {
                "action": "request_approval",
                "run_id.$": "$.run_id",
                "seq.$": "$.call.seq",
                "message_seq.$": "$.call.message_seq",
                "task_token.$": "$$.Task.Token",
                # The task's timeout runs from here: the approval expires with it, not later.
                "entered_at.$": "$$.State.EnteredTime",
            },
        },
        "TimeoutSecondsPath": "$.call.approval_timeout_seconds",
        # No heartbeat: nothing beats while a person decides, and AWS requires one shorter than
        # the timeout (the same value fails the execution).
        "ResultPath": None,
        "Retry": [
            {"ErrorEquals": _LAMBDA_TRANSIENT, "IntervalSeconds": 2, "MaxAttempts": 6, "BackoffRate": 2}
        ],
        "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "NotApproved"}],
        "Next": "GatedDispatch",
    }


def _wait_for_result(orchestrator: str) -> dict[str, Any]:
    """A deferred call (`deferred="human"` or `"client"`) is never dispatched: the orchestrator
    stores its request with this task's token, and the answer (`POST /approvals/{id}/answer`, or
    `POST /runs/{run_id}/calls/{seq}/result`) writes the call's result and answers the token, or
    the tool's own timeout passes. The same task as an approval's, by kind."""
    task = _wait_for_approval(orchestrator)
    task["Parameters"]["Payload"]["kind.$"] = "$.call.deferred"
    task["Catch"] = [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "NotAnswered"}]
    # The token's answer is the branch's outcome (`{"seq", "status"}`), as a worker's is.
    task.pop("ResultPath")
    task.pop("Next")
    task["End"] = True
    return task


def _tool_map(states: dict[str, Any], start: str, concurrency: int = MAX_PARALLEL_CALLS) -> dict[str, Any]:
    return {
        "Type": "Map",
        "ItemsPath": "$.model.decision.calls",
        "ItemSelector": {"run_id.$": "$.run_id", "call.$": "$$.Map.Item.Value"},
        "MaxConcurrency": concurrency,
        "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, "StartAt": start, "States": states},
        "ResultPath": "$.results",
        "Next": "CallModel",
    }


def _loop(orchestrator: str) -> dict[str, Any]:
    """The agent loop, the first branch of `RunWithin`: every way out of it fails the branch
    (`RunEnded` when the run ended, `RunFailed`), which also stops the deadline's timer."""
    return {
        "StartAt": "CallModel",
        "States": {
            "CallModel": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {
                    "FunctionName": orchestrator,
                    "Payload": {
                        "action": "step",
                        "run_id.$": "$.run_id",
                        "results.$": "$.results",
                        "state_machine_arn.$": "$$.StateMachine.Id",
                        "execution.$": "$$.Execution.Name",
                    },
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
                    # A turn with a call that needs a person's approval takes the Map whose
                    # branches can wait; the others keep the plain Map and its transitions.
                    {
                        "And": [
                            {"Variable": "$.model.decision.status", "StringEquals": "tool_calls"},
                            {"Variable": "$.model.decision.gated", "BooleanEquals": True},
                        ],
                        "Next": "RunGatedTools",
                    },
                    {"Variable": "$.model.decision.status", "StringEquals": "tool_calls", "Next": "RunTools"},
                    {"Variable": "$.model.decision.status", "StringEquals": "wait", "Next": "WaitForModel"},
                ],
                "Default": "Ended",
            },
            # The model's rate limit (shared/runs/rate_governor.py): waited here, no Lambda
            # running, then the same model step again (its results as they were).
            "WaitForModel": {
                "Type": "Wait",
                "SecondsPath": "$.model.decision.wait_seconds",
                "Next": "CallModel",
            },
            # State names are unique across the whole machine, Map processors included: Step
            # Functions refuses a definition that repeats one (DUPLICATE_STATE_NAME), moto does not.
            "RunTools": _tool_map(
                {"Dispatch": _dispatch("CallFailed"), "CallFailed": _call_failed()}, "Dispatch"
            ),
            "RunGatedTools": _tool_map(
                {
                    "NeedsApproval": {
                        "Type": "Choice",
                        "Choices": [
                            {
                                "Variable": "$.call.needs_approval",
                                "BooleanEquals": True,
                                "Next": "WaitForApproval",
                            },
                            # Deferred tools: answered from outside, never dispatched.
                            {"Variable": "$.call.deferred", "StringEquals": "human", "Next": "WaitForResult"},
                            {
                                "Variable": "$.call.deferred",
                                "StringEquals": "client",
                                "Next": "WaitForResult",
                            },
                        ],
                        "Default": "GatedDispatch",
                    },
                    "WaitForApproval": _wait_for_approval(orchestrator),
                    "WaitForResult": _wait_for_result(orchestrator),
                    # Unanswered in time (or its tool changed): the next model step writes the
                    # result from the record ("no answer came in time").
                    "NotAnswered": {
                        "Type": "Pass",
                        "Parameters": {"seq.$": "$.call.seq", "status": "error", "error.$": "$.error.Error"},
                        "End": True,
                    },
                    # Denied, expired or timed out: never dispatched. The next model step writes
                    # the result from the approval record (the person's reason, or the expiry).
                    "NotApproved": {
                        "Type": "Pass",
                        "Parameters": {"seq.$": "$.call.seq", "status": "error", "error.$": "$.error.Error"},
                        "End": True,
                    },
                    # As in RunTools, under names of their own: an ungated call of a gated turn, or an approved one.
                    "GatedDispatch": _dispatch("GatedCallFailed"),
                    "GatedCallFailed": _call_failed(),
                },
                "NeedsApproval",
                # Waiting branches cost nothing but would fill a bound of 10 and hold back the
                # turn's other calls: every call of a turn runs at once (the agent keeps its
                # turns within it); dispatches still queue for the workers on SQS.
                WAITING_CALLS_PER_TURN,
            ),
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
            # Not a Succeed: a Parallel ends when all its branches have, and the timer's may wait
            # for hours. The Parallel's Catch makes this the execution's success.
            "Ended": {"Type": "Fail", "Error": RUN_ENDED, "Cause": "the run ended; see the run record"},
        },
    }


def _timer(orchestrator: str) -> dict[str, Any]:
    """The second branch of `RunWithin`: a run with a deadline (its `max_duration`, in the
    execution's input) waits for it in a Wait state, no Lambda running, then fails the branch,
    which stops the loop wherever it is, calls in flight included.

    A run whose waits for people do not count (`max_duration_waits: "exclude"`) asks the
    orchestrator at the deadline whether its active time passed the limit, and if not, waits
    until the time it names and asks again (shared/runs/active_time.py)."""
    return {
        "StartAt": "HasDeadline",
        "States": {
            "HasDeadline": {
                "Type": "Choice",
                # In order, the first that holds: the starter always sends `deadline` (null for
                # none), so the path a comparison reads is there; an input without it (started by
                # hand) has no deadline either.
                "Choices": [
                    {"Variable": "$.started_with.deadline", "IsPresent": False, "Next": "NoDeadline"},
                    {"Variable": "$.started_with.deadline", "IsNull": True, "Next": "NoDeadline"},
                    # An input from before the setting counts the waits.
                    {
                        "Variable": "$.started_with.max_duration_waits",
                        "IsPresent": False,
                        "Next": "WaitForDeadline",
                    },
                    {
                        "Variable": "$.started_with.max_duration_waits",
                        "StringEquals": "exclude",
                        "Next": "WaitForActiveDeadline",
                    },
                ],
                "Default": "WaitForDeadline",
            },
            "NoDeadline": {"Type": "Succeed"},
            "WaitForDeadline": {
                "Type": "Wait",
                "TimestampPath": "$.started_with.deadline",
                "Next": "DeadlinePassed",
            },
            "DeadlinePassed": {
                "Type": "Fail",
                "Error": MAX_DURATION_REACHED,
                "Cause": "the run passed its max_duration",
            },
            # The deadline is when the limit passes if the run never waited for a person.
            "WaitForActiveDeadline": {
                "Type": "Wait",
                "TimestampPath": "$.started_with.deadline",
                "Next": "CheckActiveTime",
            },
            "CheckActiveTime": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {
                    "FunctionName": orchestrator,
                    "Payload": {
                        "action": "check_deadline",
                        "run_id.$": "$.run_id",
                        "execution.$": "$$.Execution.Name",
                    },
                },
                "ResultSelector": {"passed.$": "$.Payload.passed", "next.$": "$.Payload.next"},
                "ResultPath": "$.check",
                "Retry": [
                    {
                        "ErrorEquals": _LAMBDA_TRANSIENT,
                        "IntervalSeconds": 2,
                        "MaxAttempts": 6,
                        "BackoffRate": 2,
                    }
                ],
                # A check that cannot be made ends the run at its deadline, as if its waits
                # counted: the limit holds whatever fails.
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": None, "Next": "DeadlinePassed"}],
                "Next": "ActiveTimeLeft",
            },
            "ActiveTimeLeft": {
                "Type": "Choice",
                "Choices": [{"Variable": "$.check.passed", "BooleanEquals": True, "Next": "DeadlinePassed"}],
                "Default": "WaitForActiveTime",
            },
            "WaitForActiveTime": {
                "Type": "Wait",
                "TimestampPath": "$.check.next",
                "Next": "CheckActiveTime",
            },
        },
    }


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
                # `started_with`: the execution's input (`ExecutionInput`), the deadline's source.
                "Parameters": {"run_id.$": "$.run_id", "results": [], "started_with.$": "$"},
                "Next": "RunWithin",
            },
            # The loop, raced by the run's deadline: whichever branch ends first ends the other.
            "RunWithin": {
                "Type": "Parallel",
                "Branches": [_loop(orchestrator), _timer(orchestrator)],
                "Catch": [
                    {"ErrorEquals": [RUN_ENDED], "ResultPath": None, "Next": "Done"},
                    {"ErrorEquals": [MAX_DURATION_REACHED], "ResultPath": None, "Next": "OutOfTime"},
                ],
                "ResultPath": None,
                "Next": "Done",
            },
            # The orchestrator answers the calls in flight as not completed and ends the run `limit`.
            "OutOfTime": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {
                    "FunctionName": orchestrator,
                    "Payload": {"action": "out_of_time", "run_id.$": "$.run_id"},
                },
                "ResultPath": None,
                "Retry": [{"ErrorEquals": _LAMBDA_TRANSIENT, "IntervalSeconds": 2, "MaxAttempts": 6}],
                "Next": "Done",
            },
            "Done": {"Type": "Succeed"},
        },
    }


def loop_states(definition: dict[str, Any]) -> dict[str, Any]:
    """The agent loop's states (CallModel, Route, the Maps, MarkFailed) inside `definition`."""
    states: dict[str, Any] = definition["States"]["RunWithin"]["Branches"][0]["States"]
    return states


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
