"""Ports to the AWS services the run service drives, with their boto3 adapters."""

import json
from typing import TYPE_CHECKING, Any, Protocol

from botocore.exceptions import ClientError
from botocore.exceptions import ConnectionError as NoConnectionError
from botocore.retries.standard import ThrottledRetryableChecker

from toolpipe.shared.messages import ExecutionInput, MaxDurationWaits
from toolpipe.shared.runs.executions import execution_name

if TYPE_CHECKING:
    from mypy_boto3_stepfunctions.client import SFNClient


class ExecutionStarter(Protocol):
    """Starts a run's state machine execution."""

    def start(
        self,
        run_id: str,
        execution: int = 1,
        deadline: str | None = None,
        waits: MaxDurationWaits = "count",
    ) -> None:
        """Start the run's `execution`-th execution; starting one that exists does nothing.
        `deadline`: when the run's max_duration passes (its record's), for the execution's timer;
        `waits`: whether time waiting for a person counts toward it (its record's)."""
        ...


class ExecutionStopper(Protocol):
    """Stops a run's state machine execution."""

    def stop(self, run_id: str, execution: int, cause: str) -> None:
        """Stop the run's `execution`-th execution; one that ended or never started is left be."""
        ...


class TaskReporter(Protocol):
    """Answers the Step Functions task a call waits on. Both return False when the execution
    no longer waits for the token (timed out, stopped, already answered)."""

    def succeed(self, token: str, output: dict[str, Any]) -> bool: ...

    def heartbeat(self, token: str) -> bool: ...


# Answers that mean the execution no longer waits for this token (timed out, stopped,
# already answered): the call is over for Step Functions, so there is nothing to retry.
_CLOSED_TOKEN = {"TaskTimedOut", "InvalidToken", "TaskDoesNotExist"}
# botocore's own list of the codes that mean "throttled": the request was refused, not applied
# (private, hence the fallback should a release rename it).
_THROTTLED = frozenset(
    getattr(ThrottledRetryableChecker, "_THROTTLED_ERROR_CODES", ("Throttling", "ThrottlingException"))
)


def certainly_not_sent(error: BaseException) -> bool:
    """The request certainly did not take effect: refused (throttled, or any 4xx answer) or its
    connection never opened. A read timeout, a connection closed after sending, a 5xx or
    anything else may have taken effect: its outcome is unknown."""
    if isinstance(error, NoConnectionError):  # connect timeout, endpoint unreachable, proxy, TLS
        return True
    if not isinstance(error, ClientError):
        return False
    code = error.response.get("Error", {}).get("Code")
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in _THROTTLED or (isinstance(status, int) and 400 <= status < 500)


class StepFunctionsStarter:
    def __init__(self, client: "SFNClient", state_machine_arn: str) -> None:
        self._client = client
        self._arn = state_machine_arn

    def start(
        self,
        run_id: str,
        execution: int = 1,
        deadline: str | None = None,
        waits: MaxDurationWaits = "count",
    ) -> None:
        started_with = ExecutionInput(run_id=run_id, deadline=deadline, max_duration_waits=waits)
        try:
            # The execution is named after the run: a second start of the same run is refused
            # by Step Functions instead of running the agent twice.
            self._client.start_execution(
                stateMachineArn=self._arn,
                name=execution_name(run_id, execution),
                # `deadline` even when null, and `max_duration_waits`: the state machine's timer reads
                # them (infra/cdk/definition.py).
                input=started_with.model_dump_json(),
            )
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") != "ExecutionAlreadyExists":
                raise


class StepFunctionsTaskReporter:
    def __init__(self, client: "SFNClient") -> None:
        self._client = client

    def succeed(self, token: str, output: dict[str, Any]) -> bool:
        return self._call(lambda: self._client.send_task_success(taskToken=token, output=json.dumps(output)))

    def heartbeat(self, token: str) -> bool:
        return self._call(lambda: self._client.send_task_heartbeat(taskToken=token))

    def fail(self, token: str, error: str, cause: str) -> bool:
        return self._call(lambda: self._client.send_task_failure(taskToken=token, error=error, cause=cause))

    @staticmethod
    def _call(send: Any) -> bool:
        try:
            send()
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in _CLOSED_TOKEN:
                return False
            raise
        return True


class StepFunctionsStopper:
    def __init__(self, client: "SFNClient", state_machine_arn: str) -> None:
        self._client = client
        # Execution ARNs are the state machine's with `:execution:` and the execution's name.
        self._prefix = state_machine_arn.replace(":stateMachine:", ":execution:", 1)

    def stop(self, run_id: str, execution: int, cause: str) -> None:
        try:
            self._client.stop_execution(
                executionArn=f"{self._prefix}:{execution_name(run_id, execution)}", cause=cause
            )
        except ClientError as e:
            # Never started (a cancel raced its start): the run is marked, its first step ends it.
            if e.response.get("Error", {}).get("Code") != "ExecutionDoesNotExist":
                raise
