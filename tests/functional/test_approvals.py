"""Approval records on moto: what is stored (and what is not), the first decision wins however
many race for it, one SendTask* per approval, bad input refused with nothing written."""

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from tests.conftest import CALLS, Pipeline, _pipeline, call
from tests.e2e.test_approvals import GATED, pending, tool_messages
from toolpipe.infra.local.runtime import LOCAL_CALLER, REGION, TABLE
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS
from toolpipe.shared.deferred import ApprovalAlreadyDecidedError, arguments_hash
from toolpipe.shared.deferred.models import (
    ApprovalRunEndedError,
    ApprovalStatus,
    DeliveryFailedError,
    DeliveryUncertainError,
)
from toolpipe.shared.deferred.store import DynamoApprovalStore
from toolpipe.shared.history import DynamoHistoryStore
from toolpipe.shared.messages import ApprovalTaskRequest
from toolpipe.shared.runs.catalog import RegisteredAgents
from toolpipe.shared.runs.deferred import DeferredCalls
from toolpipe.shared.runs.events import EventPublisher
from toolpipe.shared.runs.ports import StepFunctionsTaskReporter
from toolpipe.shared.settings import CallTimeouts

ADMIN = "arn:aws:iam::000000000000:role/admin"


@pytest.fixture(autouse=True)
def gated_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(AGENTS, GATED.name, GATED)


@pytest.fixture
def admin_pipeline() -> Iterator[Pipeline]:
    yield from _pipeline({"TOOLPIPE_ADMIN_PRINCIPAL": ADMIN})


class CountingReporter(StepFunctionsTaskReporter):
    """The real reporter, counting what it sends: moto accepts a replayed SendTaskSuccess that
    AWS refuses, so the count is what shows our guard works."""

    def __init__(self) -> None:
        super().__init__(boto3.client("stepfunctions", region_name=REGION))
        self.sent: list[str] = []
        self._lock = threading.Lock()

    def succeed(self, token: str, output: dict[str, Any]) -> bool:
        with self._lock:
            self.sent.append("success")
        return super().succeed(token, output)

    def fail(self, token: str, error: str, cause: str) -> bool:
        with self._lock:
            self.sent.append(f"failure:{error}")
        return super().fail(token, error, cause)


def _service(reporter: CountingReporter) -> DeferredCalls:
    table = boto3.resource("dynamodb", region_name=REGION).Table(TABLE)
    store = DynamoHistoryStore(table, boto3.client("s3", region_name=REGION), "toolpipe-local-contents")
    return DeferredCalls(DynamoApprovalStore(table), store, reporter, agents=RegisteredAgents())


def _items(pipeline: Pipeline, approval_id: str) -> dict[str, dict[str, Any]]:
    rows = pipeline.runtime.dynamodb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"APPROVAL#{approval_id}"}},
        ConsistentRead=True,
    )["Items"]
    return {row["sk"]["S"]: row for row in rows}


def test_the_record_keeps_the_hash_and_the_token_apart_from_every_view(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("wire_money", amount=250, to="ana")]), Reply(content="ok"))
    run_id = pipeline.start("pay", agent="gated")
    approval = pending(pipeline)
    items = _items(pipeline, approval["approval_id"])

    assert set(items) == {"APPROVAL", "TOKEN"}
    record = items["APPROVAL"]
    assert record["status"]["S"] == "pending" and record["run_id"]["S"] == run_id
    assert (int(record["seq"]["N"]), int(record["message_seq"]["N"])) == (3, 2)
    assert record["requester"]["S"] == LOCAL_CALLER
    assert record["arguments_sha256"]["S"] == arguments_hash('{"to": "ana", "amount": 250}')
    token = items["TOKEN"]["token"]["S"]
    assert token not in json.dumps(record)
    _, listed = pipeline.runtime.api("GET", "/approvals")
    _, one = pipeline.runtime.api("GET", f"/approvals/{approval['approval_id']}")
    assert token not in json.dumps(listed) + json.dumps(one)
    gate = pipeline.runtime.dynamodb.get_item(
        TableName=TABLE, Key={"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "GATE#000003"}}
    )["Item"]
    assert gate["approval_id"]["S"] == approval["approval_id"] and gate["status"]["S"] == "pending"
    pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    pipeline.finish(run_id)


@pytest.mark.parametrize("approve_first", [True, False], ids=["approve-wins", "deny-wins"])
def test_twenty_racing_decisions_take_one_and_answer_the_task_once(
    pipeline: Pipeline, approve_first: bool
) -> None:
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=1)]), Reply(content="ok"))
    run_id = pipeline.start("pay", agent="gated")
    approval_id = pending(pipeline)["approval_id"]
    reporter = CountingReporter()
    service = _service(reporter)
    start = threading.Barrier(20)
    won: list[str] = []
    refused: list[str] = []

    def decide(index: int) -> None:
        approve = (index % 2 == 0) == approve_first
        start.wait()
        try:
            decided = service.decide(approval_id, LOCAL_CALLER, approve, None if approve else "no")
            won.append(decided.status.value)
        except ApprovalAlreadyDecidedError as e:
            refused.append(e.status.value)

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    body = pipeline.finish(run_id)

    # The same decision again is a retry (a 200, the task not told twice); the other decision
    # is refused, having seen the winner's. One SendTask* in all.
    assert len(set(won)) == 1 and len(won) == 10 and len(refused) == 10
    assert set(refused) == set(won)
    assert reporter.sent == ["success" if won[0] == "approved" else "failure:ApprovalDenied"]
    assert CALLS.counts.get("wire_money", 0) == (1 if won[0] == "approved" else 0)
    assert len([m for m in body["messages"] if m["kind"] == "tool_result"]) == 1
    assert len(tool_messages(pipeline, 1)) == 1


def test_bad_decisions_are_refused_and_change_nothing(admin_pipeline: Pipeline) -> None:
    pipeline = admin_pipeline
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=1)]), Reply(content="ok"))
    run_id = pipeline.start("pay", agent="gated")
    approval_id = pending(pipeline)["approval_id"]
    api = pipeline.runtime.api
    before = _items(pipeline, approval_id)

    assert api("POST", f"/approvals/{approval_id}/deny", {"reason": ""})[0] == 400
    assert api("POST", f"/approvals/{approval_id}/deny", {"reason": "x", "extra": 1})[0] == 400
    assert api("POST", f"/approvals/{approval_id}/deny", "{not json")[0] == 400
    assert api("POST", f"/approvals/{approval_id}/deny", {"reason": "x" * 1001})[0] == 400
    assert api("POST", "/approvals/NOT-AN-ID/approve")[0] == 400
    assert api("POST", f"/approvals/{'0' * 32}/approve")[0] == 404
    assert api("GET", f"/approvals/{approval_id}", caller="arn:aws:iam::000000000000:user/eve")[0] == 404
    assert api("GET", "/approvals", caller="arn:aws:iam::000000000000:user/eve")[1] == {"approvals": []}
    assert api("POST", f"/approvals/{approval_id}/approve", caller=None)[0] == 403
    assert api("GET", "/approvals?status=maybe") == (
        400,
        {
            "statusCode": 400,
            "message": "invalid request: query.status: status is one of pending, approved, denied, expired, answered",
        },
    )
    assert _items(pipeline, approval_id) == before  # nothing written, GETs included

    # The admin principal sees every approval and may decide.
    assert [
        a["approval_id"] for a in api("GET", "/approvals?status=pending", caller=ADMIN)[1]["approvals"]
    ] == [approval_id]
    status, decided = api("POST", f"/approvals/{approval_id}/deny", {"reason": "not now"}, caller=ADMIN)
    assert (status, decided["status"]) == (200, "denied")
    pipeline.finish(run_id)
    record = api("GET", f"/approvals/{approval_id}")[1]
    assert (record["status"], record["decided_by"], record["reason"]) == ("denied", ADMIN, "not now")


def test_the_store_decides_once_and_keeps_the_gate_in_step() -> None:
    from moto import mock_aws

    from tests.unit.shared.runs.test_approvals import _approval
    from toolpipe.infra.local.runtime import HISTORY_TABLE
    from toolpipe.shared.deferred import ApprovalStatus

    with mock_aws():
        boto3.client("dynamodb", region_name=REGION).create_table(TableName="t", **HISTORY_TABLE)
        store = DynamoApprovalStore(boto3.resource("dynamodb", region_name=REGION).Table("t"))
        approval = store.create(_approval(ApprovalStatus.PENDING), "token-1")
        # The waiting task started again (a retry): the same approval, with the new token.
        again = store.create(
            _approval(ApprovalStatus.PENDING).model_copy(update={"approval_id": "1" * 32}), "token-2"
        )
        assert (
            again.approval_id == approval.approval_id and store.get_token(approval.approval_id) == "token-2"
        )

        denied = store.decide(approval, ApprovalStatus.DENIED, "ana", "no")
        assert (denied.status, denied.decided_by, denied.reason) == (ApprovalStatus.DENIED, "ana", "no")
        with pytest.raises(ApprovalAlreadyDecidedError) as refused:
            store.decide(approval, ApprovalStatus.APPROVED, "bob")
        assert refused.value.status is ApprovalStatus.DENIED
        assert store.get(approval.approval_id) == denied  # the refused decision changed nothing
        gate = store.get_gate(approval.run_id, approval.seq)
        assert gate is not None and gate.status is ApprovalStatus.DENIED
        # Decided: a task started again keeps its token out of a decided approval.
        store.create(
            _approval(ApprovalStatus.PENDING).model_copy(update={"approval_id": "2" * 32}), "token-3"
        )
        assert store.get_token(approval.approval_id) == "token-2"
        assert store.list("ana", ApprovalStatus.DENIED) == [denied]
        assert store.list("ana", ApprovalStatus.PENDING) == []
        assert store.list(None, None) == [denied]


def test_the_approval_samples_drive_the_real_handler(pipeline: Pipeline) -> None:
    from tests.functional.test_events import EVENTS, _api

    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=1)]), Reply(content="ok"))
    run_id = pipeline.start("pay", agent="gated")
    approval_id = pending(pipeline)["approval_id"]

    status, _, listed = _api(json.loads((EVENTS / "api_list_approvals.json").read_text()))
    assert status == 200 and [a["approval_id"] for a in listed["approvals"]] == [approval_id]
    approve = json.loads((EVENTS / "api_approve.json").read_text().replace("APPROVAL_ID", approval_id))
    assert _api(approve)[::2] == (200, {"approval_id": approval_id, "status": "approved", "run_id": run_id})
    assert _api(approve)[0] == 200  # the same decision again: a retry, delivered again
    pipeline.finish(run_id)


class ThrottledOnce(CountingReporter):
    """The real reporter, throttled on its first answer, as Step Functions may be."""

    def succeed(self, token: str, output: dict[str, Any]) -> bool:
        self._throttle("SendTaskSuccess")
        return super().succeed(token, output)

    def fail(self, token: str, error: str, cause: str) -> bool:
        self._throttle("SendTaskFailure")
        return super().fail(token, error, cause)

    def _throttle(self, operation: str) -> None:
        if not self.sent:
            self.sent.append("throttled")
            raise ClientError(
                {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, operation
            )


class AnswerLostOnce(CountingReporter):
    """The real reporter whose first answer times out reading the reply: sent to Step Functions
    first (`heard`), or lost on the way (not `heard`). Either way the caller cannot know which."""

    def __init__(self, heard: bool) -> None:
        super().__init__()
        self._heard = heard

    def succeed(self, token: str, output: dict[str, Any]) -> bool:
        if self.sent:
            return super().succeed(token, output)
        if self._heard:
            super().succeed(token, output)
        else:
            self.sent.append("lost")
        raise ReadTimeoutError(endpoint_url="https://states.us-east-1.amazonaws.com/")


def test_a_decision_that_could_not_be_delivered_is_taken_back_and_can_be_made_again(
    pipeline: Pipeline,
) -> None:
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=1)]), Reply(content="ok"))
    run_id = pipeline.start("pay", agent="gated")
    approval_id = pending(pipeline)["approval_id"]
    service = _service(ThrottledOnce())

    with pytest.raises(DeliveryFailedError, match="is not decided"):
        service.decide(approval_id, LOCAL_CALLER, True)
    # Not "approved" while nothing was told: the retry decides, and the call runs once.
    assert service.get(approval_id, LOCAL_CALLER).status is ApprovalStatus.PENDING
    assert service.decide(approval_id, LOCAL_CALLER, True).status is ApprovalStatus.APPROVED
    pipeline.finish(run_id)
    assert CALLS.counts == {"wire_money": 1}


@pytest.mark.parametrize("heard", [True, False], ids=["heard", "lost"])
def test_an_uncertain_delivery_stays_recorded_and_the_same_decision_delivers_it_once(
    pipeline: Pipeline, heard: bool
) -> None:
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=250)]), Reply(content="ok"))
    run_id = pipeline.start("pay", agent="gated")
    approval_id = pending(pipeline)["approval_id"]
    reporter = AnswerLostOnce(heard)
    service = _service(reporter)
    edit = '{"to": "ana", "amount": 25}'

    with pytest.raises(DeliveryUncertainError, match="recorded approved, but whether its run was told"):
        service.decide(approval_id, LOCAL_CALLER, True, arguments=edit)
    # Not taken back: the task may have heard it, and a taken-back decision could be made otherwise.
    assert service.get(approval_id, LOCAL_CALLER).status is ApprovalStatus.APPROVED
    with pytest.raises(ApprovalAlreadyDecidedError):
        service.decide(approval_id, LOCAL_CALLER, False, "changed my mind")
    with pytest.raises(ApprovalAlreadyDecidedError):  # approving other arguments is another decision
        service.decide(approval_id, LOCAL_CALLER, True)
    # The same decision again (the same edit, spelled otherwise) is delivered, not refused.
    again = service.decide(approval_id, LOCAL_CALLER, True, arguments='{"amount": 25, "to": "ana"}')
    assert again.status is ApprovalStatus.APPROVED and not service.record(approval_id).delivery_uncertain
    # Once told, the same decision yet again is answered without telling the task a third time.
    service.decide(approval_id, LOCAL_CALLER, True, arguments=edit)
    pipeline.finish(run_id)

    assert CALLS.counts == {"wire_money": 1}
    assert tool_messages(pipeline, 1)[0].endswith("sent 25.0 to ana")
    assert reporter.sent == (["success", "success"] if heard else ["lost", "success"])


@pytest.fixture
def short_approvals() -> Iterator[Pipeline]:
    yield from _pipeline({"TOOLPIPE_APPROVAL_TIMEOUT_SECONDS": "4"})


def test_an_approval_its_task_never_heard_is_not_called_expired(short_approvals: Pipeline) -> None:
    """The decision stays recorded approved; the task's wait ends unanswered; the model is told
    the call did not complete (never that it waits, or that nobody approved it in time)."""
    pipeline = short_approvals
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=1)]), Reply(content="ok"))
    run_id = pipeline.start("pay", agent="gated")
    approval_id = pending(pipeline)["approval_id"]
    with pytest.raises(DeliveryUncertainError):
        _service(AnswerLostOnce(heard=False)).decide(approval_id, LOCAL_CALLER, True)
    pipeline.finish(run_id)

    assert "wire_money" not in CALLS.counts
    [told] = tool_messages(pipeline, 1)
    assert told.startswith("Error: the tool call did not complete (")
    assert "expired" not in told and "pending" not in told and "in time" not in told
    assert pipeline.runtime.api("GET", f"/approvals/{approval_id}")[1]["status"] == "approved"


def test_a_decision_taken_back_keeps_nothing_of_it(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=1)]), Reply(content="ok"))
    run_id = pipeline.start("pay", agent="gated")
    approval_id = pending(pipeline)["approval_id"]
    before = _items(pipeline, approval_id)["APPROVAL"]

    with pytest.raises(DeliveryFailedError):
        _service(ThrottledOnce()).decide(approval_id, LOCAL_CALLER, False, "not to <Ana>")
    # Pending as if nobody had decided: no who, when or why left for a page or a listing to show.
    assert _items(pipeline, approval_id)["APPROVAL"] == before
    pipeline.runtime.api("POST", f"/approvals/{approval_id}/approve")
    pipeline.finish(run_id)
    record = pipeline.runtime.api("GET", f"/approvals/{approval_id}")[1]
    assert (record["status"], record.get("reason")) == ("approved", None)


def test_an_approval_expires_with_its_waiting_task_not_later(pipeline: Pipeline) -> None:
    # The task's timeout runs from when it started, before the orchestrator stored the approval:
    # an expiry counted from the store would accept decisions Step Functions then refuses.
    pipeline.script(Reply(tool_calls=[call("wire_money", amount=250, to="ana")]), Reply(content="ok"))
    run_id = pipeline.start("pay", agent="gated")
    approval = pending(pipeline)
    sfn = pipeline.runtime.sfn
    execution = sfn.list_executions(stateMachineArn=pipeline.runtime.state_machine_arn)["executions"][0]
    history = sfn.get_execution_history(executionArn=execution["executionArn"])["events"]
    entered = next(
        e["timestamp"]
        for e in history
        if e["type"] == "TaskStateEntered" and e["stateEnteredEventDetails"]["name"] == "WaitForApproval"
    )
    timeout = timedelta(
        seconds=CallTimeouts.from_env(
            pipeline.runtime.functions["orchestrator"].environment
        ).approval_timeout_seconds
    )
    # moto stamps the state's EnteredTime and its history event with two clock reads (a
    # millisecond or so apart under load): the same moment, as far as a day's timeout goes.
    assert abs(datetime.fromisoformat(approval["expires_at"]) - (entered + timeout)) < timedelta(
        milliseconds=50
    )
    assert approval["created_at"] > entered.isoformat(timespec="milliseconds")
    pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    pipeline.finish(run_id)


def test_a_task_started_again_after_its_calls_time_ends_at_once_as_expired(pipeline: Pipeline) -> None:
    # A restarted local runtime starts the waiting task again with a fresh timeout: the call's
    # record, past its time, refuses any decision, so the task must not wait that timeout again.
    pipeline.script(Reply(tool_calls=[call("wire_money", amount=250, to="ana")]), Reply(content="ok"))
    run_id = pipeline.start("pay", agent="gated")
    approval = pending(pipeline)
    table = boto3.resource("dynamodb", region_name=REGION).Table(TABLE)
    table.update_item(  # the time that passed while the runtime was down
        Key={"pk": f"APPROVAL#{approval['approval_id']}", "sk": "APPROVAL"},
        UpdateExpression="SET expires_at = :past",
        ExpressionAttributeValues={":past": "2020-01-01T00:00:00.000+00:00"},
    )
    token = DynamoApprovalStore(table).get_token(approval["approval_id"])
    assert token is not None
    reporter = CountingReporter()
    again = ApprovalTaskRequest(
        action="request_approval",
        run_id=run_id,
        seq=approval["seq"],
        message_seq=approval["seq"] - 1,
        task_token=token,
        entered_at=datetime.now(UTC),
    )
    stored = _service(reporter).request(again)

    assert stored.status is ApprovalStatus.EXPIRED
    assert reporter.sent == ["failure:ApprovalExpired"]
    body = pipeline.finish(run_id)
    assert body["run"]["status"] == "succeeded"
    [told] = tool_messages(pipeline, 1)
    assert "expired" in told.lower() or "in time" in told.lower()


def test_a_denial_with_another_reason_is_another_decision(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=1)]), Reply(content="ok"))
    run_id = pipeline.start("pay", agent="gated")
    approval_id = pending(pipeline)["approval_id"]
    reporter = CountingReporter()
    service = _service(reporter)
    service.decide(approval_id, LOCAL_CALLER, False, "not to Ana")
    with pytest.raises(ApprovalAlreadyDecidedError):  # never a 200 that drops the new reason
        service.decide(approval_id, LOCAL_CALLER, False, "something else")
    assert service.decide(approval_id, LOCAL_CALLER, False, "not to Ana").reason == "not to Ana"
    pipeline.finish(run_id)
    assert reporter.sent == ["failure:ApprovalDenied"]
    assert "not to Ana" in tool_messages(pipeline, 1)[0]


def test_an_uncertain_approval_sent_again_after_its_run_ended_is_a_409(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=1)]), Reply(content="ok"))
    run_id = pipeline.start("pay", agent="gated")
    approval_id = pending(pipeline)["approval_id"]
    service = _service(AnswerLostOnce(heard=False))
    with pytest.raises(DeliveryUncertainError):
        service.decide(approval_id, LOCAL_CALLER, True)
    assert pipeline.runtime.api("POST", f"/runs/{run_id}/cancel")[0] == 200
    # Nothing waits for it any more: never a 200 "approved" for a call that did not run.
    with pytest.raises(ApprovalRunEndedError):
        service.decide(approval_id, LOCAL_CALLER, True)
    assert "wire_money" not in CALLS.counts


class WaitSpans:
    """The run spans port, keeping the waits it is told of (the rest is not this file's)."""

    enabled = True

    def __init__(self) -> None:
        self.waits: list[tuple[str, str]] = []

    def wait_ended(self, run: Any, approval: Any) -> None:
        self.waits.append((approval.approval_id, approval.status.value))

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


@pytest.mark.parametrize(
    ("reporter", "raised"),
    [(AnswerLostOnce(heard=False), DeliveryUncertainError), (ThrottledOnce(), DeliveryFailedError)],
    ids=["uncertain", "taken-back"],
)
def test_a_waits_span_is_told_once_whatever_its_delivery_did(
    pipeline: Pipeline, reporter: CountingReporter, raised: type[Exception]
) -> None:
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=1)]), Reply(content="ok"))
    run_id = pipeline.start("pay", agent="gated")
    approval_id = pending(pipeline)["approval_id"]
    spans = WaitSpans()
    table = boto3.resource("dynamodb", region_name=REGION).Table(TABLE)
    store = DynamoHistoryStore(table, boto3.client("s3", region_name=REGION), "toolpipe-local-contents")
    service = DeferredCalls(
        DynamoApprovalStore(table),
        store,
        reporter,
        agents=RegisteredAgents(),
        events=EventPublisher(None, None, spans),
    )

    with pytest.raises(raised):
        service.decide(approval_id, LOCAL_CALLER, True)
    # Uncertain: the decision stands, and so does its span. Taken back: nothing was decided yet.
    assert spans.waits == ([(approval_id, "approved")] if raised is DeliveryUncertainError else [])
    service.decide(approval_id, LOCAL_CALLER, True)  # the same decision again: a retry
    pipeline.finish(run_id)
    assert spans.waits == [(approval_id, "approved")]
