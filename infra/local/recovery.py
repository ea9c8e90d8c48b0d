"""Taking up runs after the local runtime restarted: none is silently lost.

Executions are threads of moto's interpreter and die with the process; so do their task tokens,
and the tool queue is not kept (its messages carry those dead tokens). What survives is the
table (`infra/local/persistence.py`), and it holds everything a run needs to go on: each run
record says which execution is current, and a model step whose last reply has calls without
results dispatches them again (`ModelStep._is_retry`). So each run still recorded running is
handed to a fresh execution (`<run_id>--<n+1>`), exactly as a long run continues.

The tool ledger decides what a re-dispatched call does: answer from its stored result, run it
when it was never claimed, or — for a call claimed by the dead process, whose tool may or may
not have had its effect — run it again only if the tool is idempotent, otherwise end it "in
doubt". Those claims' leases outlive the process that held them; they are expired first, or the
redelivery would wait out the lease (150 s) as BUSY.

A child run (an agent tool's) is resumed like any run; its parent is too, and the parent's
re-dispatched call hands the child the new task token (`start_child` is keyed by the call's
slot). A child that ended before the crash but had not yet answered its parent answers it here.
"""

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from toolpipe.shared.agents import get_agent
from toolpipe.shared.history.store import DynamoHistoryStore
from toolpipe.shared.messages import RunRecord, RunStatus
from toolpipe.shared.runs import children
from toolpipe.shared.runs.events import NO_EVENTS, EventPublisher
from toolpipe.shared.runs.ports import StepFunctionsStarter, StepFunctionsTaskReporter
from toolpipe.shared.runs.recorder import whole_text

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

logger = logging.getLogger(__name__)

RESTART_FAILURE = "the local runtime restarted and the run could not go on"


def _scan(client: "DynamoDBClient", **kwargs: Any) -> Iterator[dict[str, Any]]:
    for page in client.get_paginator("scan").paginate(**kwargs):
        yield from page.get("Items", [])


def expire_claims(client: "DynamoDBClient", table: str) -> int:
    """End the lease of every claim a previous process held; how many there were.

    Only one process serves a state directory (its lock), so every claim found at start belongs
    to a process that is gone.
    """
    expired = 0
    for item in _scan(
        client,
        TableName=table,
        FilterExpression="begins_with(sk, :call) AND #state = :claimed",
        ExpressionAttributeNames={"#state": "state"},
        ExpressionAttributeValues={":call": {"S": "CALL#"}, ":claimed": {"S": "CLAIMED"}},
    ):
        try:
            client.update_item(
                TableName=table,
                Key={"pk": item["pk"], "sk": item["sk"]},
                UpdateExpression="SET lease_until = :gone",
                # Still the dead owner's claim: anything else is not ours to touch.
                ConditionExpression="#owner = :owner AND #state = :claimed",
                ExpressionAttributeNames={"#owner": "owner", "#state": "state"},
                ExpressionAttributeValues={
                    ":gone": {"N": "0"},
                    ":owner": item.get("owner", {"S": ""}),
                    ":claimed": {"S": "CLAIMED"},
                },
            )
            expired += 1
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
    return expired


def resume_runs(
    client: "DynamoDBClient",
    table: str,
    store: DynamoHistoryStore,
    starter: StepFunctionsStarter,
    reporter: StepFunctionsTaskReporter,
    events: EventPublisher = NO_EVENTS,
) -> list[str]:
    """Hand every running run to a fresh execution; the ids of those that went on.

    A run that cannot go on (its agent is no longer registered, say) is failed with the reason.
    """
    runs = [
        store.get_run(item["pk"]["S"].removeprefix("RUN#"))
        for item in _scan(
            client,
            TableName=table,
            FilterExpression="sk = :meta",
            ExpressionAttributeValues={":meta": {"S": "META"}},
            ProjectionExpression="pk",
        )
    ]
    for run in runs:
        if run.status is not RunStatus.RUNNING and run.parent is not None:
            _answer_waiting_parent(store, reporter, run, events)
    running = [run for run in runs if run.status is RunStatus.RUNNING]
    # Every run is pointed at its next execution before any starts: a parent's re-dispatched
    # agent call starts its child's first execution again, which then finds it superseded.
    planned: list[RunRecord] = []
    for run in running:
        try:
            get_agent(run.current_agent)  # else its next step would fail with a less telling reason
            store.set_execution(run.run_id, run.execution + 1, run.turn)
            planned.append(run)
        except Exception as e:
            _fail(store, reporter, run, e, events)
    resumed = []
    for run in planned:
        try:
            starter.start(run.run_id, run.execution + 1, run.deadline, run.max_duration_waits)
            resumed.append(run.run_id)
        except Exception as e:
            _fail(store, reporter, run, e, events)
    return resumed


def _answer_waiting_parent(
    store: DynamoHistoryStore, reporter: StepFunctionsTaskReporter, child: RunRecord, events: EventPublisher
) -> None:
    """A child that ended before the crash and whose parent's call slot is still empty."""
    parent = child.parent
    assert parent is not None
    if store.get_run(parent.run_id).status is not RunStatus.RUNNING:
        return
    if store.get_item(parent.run_id, parent.seq) is not None:
        return
    output = whole_text(store, child.output, child.output_ref)
    children.answer_parent(store, reporter, child, child.status, output, child.error, events)


def _fail(
    store: DynamoHistoryStore,
    reporter: StepFunctionsTaskReporter,
    run: RunRecord,
    error: Exception,
    events: EventPublisher,
) -> None:
    logger.warning("a run could not be resumed", extra={"run_id": run.run_id, "error": type(error).__name__})
    reason = f"{RESTART_FAILURE}: {error}"
    if store.finish_run(run.run_id, RunStatus.FAILED, error=reason):
        events.run_ended(store, run.run_id)
        children.answer_parent(store, reporter, run, RunStatus.FAILED, None, reason, events)
