"""Step Functions execution status changes, emitted locally as AWS emits them to EventBridge.

moto's Step Functions sends no events, and moto's EventBridge cannot target a Lambda
function. Every execution moto's interpreter runs ends in one method,
`BaseExecutionWorkerCommunication.terminated`, on the execution's own thread; wrapping it once
per process turns each ending into the "Step Functions Execution Status Change" event AWS
would put on the default bus, and hands it to the subscriber registered for that state
machine (the local runtime, which applies the stack's rule to it). For a stop to end as on AWS,
two fixes of moto's stop are needed too: `patches.correctness.stop_interrupts_waits` and
`error_keeps_the_stop`.

An execution counts as "delivering" from the moment its ending begins until its subscriber
returns, before moto shows the new status: whoever waits for the execution, then for
`idle()`, sees the run record the subscriber wrote.
"""

import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication

from toolpipe.infra.cdk.definition import EXECUTION_ENDED_DETAIL_TYPE, EXECUTION_ENDED_SOURCE
from toolpipe.infra.local.process_patch import Patched

Subscriber = Callable[[dict[str, Any]], None]

_state = threading.Condition()
_subscribers: dict[str, Subscriber] = {}  # state machine ARN -> subscriber
_delivering: dict[str, int] = {}  # state machine ARN -> endings not yet delivered
_endings = 0  # executions that ended in this process, so waiters sleep until the next one


def subscribe(state_machine_arn: str, subscriber: Subscriber) -> None:
    with _state:
        _subscribers[state_machine_arn] = subscriber


def unsubscribe(state_machine_arn: str) -> None:
    with _state:
        _subscribers.pop(state_machine_arn, None)


def idle(state_machine_arn: str, timeout: float) -> bool:
    """Wait until no ending of this state machine's executions is being delivered."""
    deadline = time.monotonic() + timeout
    with _state:
        while _delivering.get(state_machine_arn, 0):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            _state.wait(remaining)
    return True


def endings() -> int:
    """How many executions have ended so far: pass it to `wait_for_ending`."""
    with _state:
        return _endings


def wait_for_ending(seen: int, timeout: float) -> None:
    """Sleep until an execution ends after `endings()` returned `seen`, or `timeout` passes."""
    with _state:
        _state.wait_for(lambda: _endings != seen, timeout)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _millis(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


def status_change_event(execution: Any) -> dict[str, Any]:
    """The EventBridge event AWS sends for an execution's new status (documented shape;
    `input` and `output` are left out, as they are when the state machine hides execution data)."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": EXECUTION_ENDED_DETAIL_TYPE,
        "source": EXECUTION_ENDED_SOURCE,
        "account": execution.account_id,
        "time": _iso(execution.stop_date),
        "region": execution.region_name,
        "resources": [execution.exec_arn],
        "detail": {
            "executionArn": execution.exec_arn,
            "stateMachineArn": execution.state_machine_arn,
            "name": execution.name,
            "status": execution.status,
            "startDate": _millis(execution.start_date),
            "stopDate": _millis(execution.stop_date),
            "input": None,
            "output": None,
            "error": execution.error,
            "cause": execution.cause,
        },
    }


def _deliver(execution: Any) -> None:
    with _state:
        subscriber = _subscribers.get(execution.state_machine_arn)
    if subscriber is None:
        return
    try:
        subscriber(status_change_event(execution))
    except Exception:
        # EventBridge would retry, then keep the event in the rule's DLQ. Said aloud, since
        # locally there is no DLQ to find it in.
        logging.getLogger(__name__).exception("execution status change not delivered")


def _announcing(
    terminated: Callable[[BaseExecutionWorkerCommunication], None],
) -> Callable[[BaseExecutionWorkerCommunication], None]:
    def emit_on_termination(self: BaseExecutionWorkerCommunication) -> None:
        arn = self.execution.state_machine_arn
        with _state:
            _delivering[arn] = _delivering.get(arn, 0) + 1
        try:
            terminated(self)  # sets the status that describe_execution shows
            _deliver(self.execution)
        finally:
            global _endings
            with _state:
                _delivering[arn] -= 1
                _endings += 1
                _state.notify_all()

    return emit_on_termination


_PATCHED = Patched([(BaseExecutionWorkerCommunication, "terminated", _announcing)], wrap=True)


def install() -> Callable[[], None]:
    """Wrap the end of every execution moto runs, until the last runtime's undo."""
    return _PATCHED.install()
