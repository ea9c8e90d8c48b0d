"""How long `toolpipe serve` serves: until a signal, or idle that long (runs that only wait for
a person or a program do not keep it); then it drains."""

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from toolpipe.infra.local import lambdas
from toolpipe.infra.local.runtime import TABLE
from toolpipe.shared.deferred.models import ApprovalStatus
from toolpipe.shared.deferred.store import RECORD_SK
from toolpipe.shared.dynamo import APPROVAL_PREFIX

# How long a released server waits for a request before it stops: a client that comes later
# starts the next server.
RELEASED_IDLE_SECONDS = 0.25

if TYPE_CHECKING:
    from toolpipe.infra.local.runtime import LocalRuntime
    from toolpipe.infra.local.server import LocalServer


class Flag(Protocol):
    """Set by a signal (`infra/cli/serving.py`'s `SignalFlag`), or a `threading.Event`."""

    def wait(self, timeout: float) -> bool: ...


class Idle(Protocol):
    """A server that can say how long it has had no request in progress."""

    def idle_seconds(self) -> float: ...


def serve_until_stopped(
    runtime: "LocalRuntime",
    server: "LocalServer",
    stop: Flag,
    hurry: Flag,
    idle_exit: float | None,
    also_serving: Sequence[Idle] = (),
) -> None:
    """Serve until `stop` (a signal) or, with `idle_exit`, until idle that long; then drain.

    Idle: no request in progress and no run at work. A run whose calls wait for a person or a
    program (approvals, answers, results) is not at work: the state folder keeps it, and the next
    server resumes it, waiting again on the same approval. Draining refuses new runs (503,
    nothing written, so clients send them to the next server) while reads and event streams go
    on, until the runs at work end, `runtime.drain_seconds` pass or `hurry` (a second signal) is
    set; the runtime's own exit stops whatever is left. Requests to `also_serving` (the AWS
    endpoint) count as activity too.

    Once the command that started the server has released it (`POST /_local/release`, as it
    finishes), the API is idle `RELEASED_IDLE_SECONDS` after that command's last request rather
    than `idle_exit` (that command waits for the server to stop), and still `idle_exit` after any
    other client's; the AWS endpoint still needs `idle_exit` too.
    """
    quiet_since = time.monotonic()
    # A stop ends the wait at once: the step only paces the idle checks, and without an idle
    # exit there are none to make (woken ten times a second, an idle server spent ~1 ms of CPU
    # a second on nothing).
    step = 0.1 if idle_exit is not None else 5.0
    while not stop.wait(step):
        if idle_exit is None:
            continue
        # The command that started the server is done with it (`server.released`): what is left
        # is to wait for the others, the whole idle exit after each one's last request.
        released = server.released.is_set() and server.others_idle_seconds() >= idle_exit
        wanted = min(idle_exit, RELEASED_IDLE_SECONDS) if released else idle_exit
        if server.idle_seconds() < wanted or any(s.idle_seconds() < idle_exit for s in also_serving):
            continue
        if busy(runtime):
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= wanted:
            break
    server.draining.set()
    deadline = time.monotonic() + runtime.drain_seconds
    while busy(runtime) and time.monotonic() < deadline and not hurry.wait(0.05):
        pass
    # The drain is over (its time spent, or a second signal): the runtime's exit stops the
    # executions still running at once, rather than drain for as long again.
    runtime.drain_seconds = 0.0


def busy(runtime: "LocalRuntime") -> bool:
    """Whether a run is at work: a running execution whose run has no call waiting for a person
    or a program, a handler running, or a tool call queued."""
    running = runtime.sfn.list_executions(stateMachineArn=runtime.state_machine_arn, statusFilter="RUNNING")[
        "executions"
    ]
    if not running:
        return False
    if lambdas.in_progress():
        return True
    queued = runtime.sqs.get_queue_attributes(
        QueueUrl=runtime.queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    if any(int(count) for count in queued.values()):
        return True
    waiting = {w["run_id"] for w in waits(runtime)}
    # An execution is named after its run (`<run_id>`, then `<run_id>--<n>` as the run goes on).
    return any(str(e["name"]).partition("--")[0] not in waiting for e in running)


def waits(runtime: "LocalRuntime") -> list[dict[str, str]]:
    """The calls that wait for a person or a program, of every caller's runs: approval id, run,
    tool, kind."""
    found: list[dict[str, str]] = []
    for page in runtime.dynamodb.get_paginator("scan").paginate(
        TableName=TABLE,
        FilterExpression="begins_with(pk, :approval) AND sk = :record AND #status = :pending",
        ExpressionAttributeNames={"#status": "status"},
        ExpressionAttributeValues={
            ":approval": {"S": APPROVAL_PREFIX},
            ":record": {"S": RECORD_SK},
            ":pending": {"S": ApprovalStatus.PENDING.value},
        },
    ):
        for item in page.get("Items", []):
            found.append(
                {
                    "approval_id": item["approval_id"]["S"],
                    "run_id": item["run_id"]["S"],
                    "tool": item.get("tool", {}).get("S", ""),
                    "kind": item.get("kind", {}).get("S", "approval"),
                }
            )
    return found
