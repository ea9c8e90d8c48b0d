"""The tool-call timings, read back from the synthesized template, must hang together.

A redelivery that cannot happen before the task gives up, or a DLQ that the call's timeout
reaches first, is a failure-table row that silently does not hold: these tests derive each
invariant from what would deploy, not from the constants that built it.
"""

from dataclasses import dataclass
from typing import Any

from toolpipe.infra.cdk import functions, limits
from toolpipe.shared.settings import CallTimeouts, WorkerSettings

ORCHESTRATOR = functions.ORCHESTRATOR.handler
WORKER = functions.TOOL_WORKER.handler


@dataclass(frozen=True)
class Deployed:
    worker_timeout: int
    visibility: int
    max_receives: int
    call_timeout: int
    heartbeat_timeout: int
    heartbeat_every: float


def _function(template: Any, handler: str) -> dict[str, Any]:
    found = template.find_resources("AWS::Lambda::Function", {"Properties": {"Handler": handler}})
    assert len(found) == 1, found
    return dict(next(iter(found.values()))["Properties"])


def _deployed(template: Any) -> Deployed:
    queues = [
        q["Properties"]
        for q in template.find_resources("AWS::SQS::Queue").values()
        if "RedrivePolicy" in q["Properties"]
    ]
    assert len(queues) == 1, queues
    orchestrator_env = _function(template, ORCHESTRATOR)["Environment"]["Variables"]
    worker = _function(template, WORKER)
    return Deployed(
        worker_timeout=int(worker["Timeout"]),
        visibility=int(queues[0]["VisibilityTimeout"]),
        max_receives=int(queues[0]["RedrivePolicy"]["maxReceiveCount"]),
        call_timeout=int(orchestrator_env["TOOLPIPE_CALL_TIMEOUT_SECONDS"]),
        heartbeat_timeout=int(orchestrator_env["TOOLPIPE_CALL_HEARTBEAT_SECONDS"]),
        heartbeat_every=float(worker["Environment"]["Variables"]["TOOLPIPE_HEARTBEAT_EVERY"]),
    )


def test_visibility_is_at_least_six_worker_timeouts(template: Any) -> None:
    d = _deployed(template)
    assert d.visibility >= 6 * d.worker_timeout


def test_a_claim_lease_ends_before_the_redelivery(template: Any) -> None:
    d = _deployed(template)
    assert d.worker_timeout + limits.CLAIM_LEASE_MARGIN_SECONDS < d.visibility


def test_the_heartbeat_outlasts_a_redelivery(template: Any) -> None:
    """A crashed delivery is silent for one visibility timeout; its redelivery beats at once."""
    d = _deployed(template)
    assert d.heartbeat_timeout >= d.visibility + 60
    # Two beats of a live call may be lost without ending it.
    assert 3 * d.heartbeat_every <= d.heartbeat_timeout - d.visibility


def test_every_delivery_and_the_dlq_happen_before_the_call_gives_up(template: Any) -> None:
    d = _deployed(template)
    assert d.call_timeout >= d.max_receives * d.visibility + d.heartbeat_timeout


def test_a_live_delivery_fits_the_worker_and_the_call(template: Any) -> None:
    d = _deployed(template)
    assert d.heartbeat_every < d.worker_timeout < d.heartbeat_timeout < d.call_timeout


def test_settings_defaults_are_the_deployed_numbers(template: Any) -> None:
    """Locally nothing sets these variables: the defaults must be what the stack deploys."""
    d = _deployed(template)
    timeouts = CallTimeouts.from_env({})
    assert (timeouts.timeout_seconds, timeouts.heartbeat_seconds) == (d.call_timeout, d.heartbeat_timeout)
    assert WorkerSettings.from_env({}).heartbeat_every == d.heartbeat_every


def test_the_execution_has_its_own_long_timeout(template: Any) -> None:
    import json

    machine = next(iter(template.find_resources("AWS::StepFunctions::StateMachine").values()))
    timeout = json.loads(machine["Properties"]["DefinitionString"])["TimeoutSeconds"]
    # Above any one call (approvals will wait for days), below Standard's one year.
    assert 7 * 24 * 3600 <= timeout < 365 * 24 * 3600
    assert timeout == limits.EXECUTION_TIMEOUT_SECONDS


def test_a_call_waits_for_approval_less_than_its_execution_lives(template: Any) -> None:
    orchestrator_env = _function(template, ORCHESTRATOR)["Environment"]["Variables"]
    approval = int(orchestrator_env["TOOLPIPE_APPROVAL_TIMEOUT_SECONDS"])
    assert approval == limits.APPROVAL_TIMEOUT_SECONDS == CallTimeouts.from_env({}).approval_timeout_seconds
    # A call decided at the last moment still has its whole call timeout to run in.
    assert approval + limits.CALL_TIMEOUT_SECONDS < limits.EXECUTION_TIMEOUT_SECONDS
