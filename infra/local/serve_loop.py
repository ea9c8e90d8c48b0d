"""How long `toolpipe serve` serves: until a signal, or idle that long; then it drains."""

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from toolpipe.infra.local.runtime import LocalRuntime
    from toolpipe.infra.local.server import LocalServer


class Idle(Protocol):
    """A server that can say how long it has had no request in progress."""

    def idle_seconds(self) -> float: ...


def serve_until_stopped(
    runtime: "LocalRuntime",
    server: "LocalServer",
    stop: threading.Event,
    hurry: threading.Event,
    idle_exit: float | None,
    also_serving: Sequence[Idle] = (),
) -> None:
    """Serve until `stop` (a signal) or, with `idle_exit`, until idle that long; then drain.

    Draining refuses new runs (503, nothing written, so clients send them to the next server)
    while reads and event streams go on, until the runs in progress end, `runtime.drain_seconds`
    pass or `hurry` (a second signal) is set; the runtime's own exit stops whatever is left.
    Requests to `also_serving` (the AWS endpoint) count as activity too.
    """
    while not stop.wait(0.1):
        idle = min(s.idle_seconds() for s in (server, *also_serving))
        if idle_exit is not None and idle >= idle_exit and not _running(runtime):
            break
    server.draining.set()
    deadline = time.monotonic() + runtime.drain_seconds
    while _running(runtime) and time.monotonic() < deadline and not hurry.wait(0.05):
        pass
    # The drain is over (its time spent, or a second signal): the runtime's exit stops the
    # executions still running at once, rather than drain for as long again.
    runtime.drain_seconds = 0.0


def _running(runtime: "LocalRuntime") -> bool:
    return bool(
        runtime.sfn.list_executions(stateMachineArn=runtime.state_machine_arn, statusFilter="RUNNING")[
            "executions"
        ]
    )
