"""A task's heartbeat and answer are accepted from the moment its token is sent.

moto: a `waitForTaskToken` task sets up its heartbeat clock only after its message is sent. A
worker answering within that window (local workers are woken by the send, so they can) saw its
first heartbeat refused as an invalid token, and a success arriving then waited out the whole
heartbeat timeout.

Why it matters: a tool call answered quickly was reported timed out, or its run stalled for the
heartbeat timeout. On AWS the token is valid from the send.

The patch: a heartbeat before the clock starts is accepted, and an outcome already in ends the
wait at once.
"""

from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackEndpoint, HeartbeatEndpoint

CHECKED_WITH = ("5.2.5",)


def _setup_heartbeat_endpoint(self: CallbackEndpoint, heartbeat_seconds: int) -> HeartbeatEndpoint:
    endpoint = HeartbeatEndpoint(heartbeat_seconds=heartbeat_seconds)
    self._heartbeat_endpoint = endpoint
    # `notify` stores the outcome before it reads the endpoint: whichever runs second sees
    # the other's write, so an outcome that came in first still ends the wait.
    if self.get_outcome() is not None:
        endpoint.notify()  # type: ignore[no-untyped-call]  # moto leaves `notify` unannotated
    return endpoint


def _notify_heartbeat(self: CallbackEndpoint) -> bool:
    endpoint = self._heartbeat_endpoint
    if endpoint is None:
        return True  # the task is live; its heartbeat clock has not started yet
    endpoint.notify()  # type: ignore[no-untyped-call]  # moto leaves `notify` unannotated
    return True


def install() -> None:
    CallbackEndpoint.setup_heartbeat_endpoint = _setup_heartbeat_endpoint  # type: ignore[method-assign]
    CallbackEndpoint.notify_heartbeat = _notify_heartbeat  # type: ignore[method-assign]
