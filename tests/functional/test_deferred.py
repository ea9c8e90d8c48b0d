"""A deferred call's answer through the approval service, on moto: answered once however many
race, the task told once, and an answer that could not be delivered taken back (issue 9, item 7)."""

import json
import threading
import time
from unittest.mock import ANY

import boto3
import pytest

from tests.conftest import Pipeline, call
from tests.e2e.test_deferred import DEFERRING, tool_messages, waiting
from tests.functional.test_approvals import CountingReporter, ThrottledOnce, _service
from toolpipe.infra.local.runtime import BUCKET, LOCAL_CALLER, REGION, TABLE
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS
from toolpipe.shared.deferred.models import ApprovalAlreadyDecidedError, ApprovalStatus, DeliveryFailedError
from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.history import DynamoHistoryStore
from toolpipe.shared.messages import ToolResult


@pytest.fixture(autouse=True)
def deferring_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(AGENTS, DEFERRING.name, DEFERRING)


def test_twenty_racing_answers_take_one_and_answer_the_task_once(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("ask_user", question="Which city?")]), Reply(content="ok"))
    run_id = pipeline.start("trip", agent="deferring")
    approval_id = waiting(pipeline)["approval_id"]
    reporter = CountingReporter()
    service = _service(reporter)
    start = threading.Barrier(20)
    won: list[str] = []
    refused: list[str] = []

    def answer(index: int) -> None:
        start.wait()
        try:
            won.append(service.answer(approval_id, LOCAL_CALLER, f"city {index}").answer_preview or "")
        except ApprovalAlreadyDecidedError as e:
            refused.append(e.status.value)

    threads = [threading.Thread(target=answer, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    body = pipeline.finish(run_id)

    assert len(won) == 1 and refused == ["answered"] * 19
    assert reporter.sent == ["success"]
    assert tool_messages(pipeline, 1) == won
    assert [m["content"] for m in body["messages"] if m["kind"] == "tool_result"] == won


def test_an_answer_that_could_not_be_delivered_is_taken_back_and_the_first_result_stands(
    pipeline: Pipeline,
) -> None:
    pipeline.script(Reply(tool_calls=[call("ask_user", question="Which city?")]), Reply(content="ok"))
    run_id = pipeline.start("trip", agent="deferring")
    approval_id = waiting(pipeline)["approval_id"]
    service = _service(ThrottledOnce())

    with pytest.raises(DeliveryFailedError, match="is not decided"):
        service.answer(approval_id, LOCAL_CALLER, "Lyon")
    # Not "answered" while the task was not told: the retry answers it.
    assert service.get(approval_id, LOCAL_CALLER).status is ApprovalStatus.PENDING
    retried = service.answer(approval_id, LOCAL_CALLER, "Paris")
    pipeline.finish(run_id)
    # The slot kept the first answer's result: the record says what the model read.
    assert (retried.status, retried.answer_preview) == (ApprovalStatus.ANSWERED, "Lyon")
    assert tool_messages(pipeline, 1) == ["Lyon"]


def test_the_samples_drive_the_real_handler(pipeline: Pipeline) -> None:
    from tests.functional.test_events import EVENTS, _api

    pipeline.script(
        Reply(tool_calls=[call("read_clipboard", format="text"), call("ask_user", question="Which city?")]),
        Reply(content="ok"),
    )
    run_id = pipeline.start("go", agent="deferring")
    deadline = time.monotonic() + 20
    while len(listed := pipeline.runtime.api("GET", "/approvals?status=pending")[1]["approvals"]) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    [asked] = [a for a in listed if a["kind"] == "human"]
    result = json.loads((EVENTS / "api_post_result.json").read_text().replace("RUN_ID", run_id))
    assert _api(result)[::2] == (200, {"approval_id": ANY, "status": "answered", "run_id": run_id, "seq": 3})
    answer = json.loads((EVENTS / "api_answer.json").read_text().replace("APPROVAL_ID", asked["approval_id"]))
    assert _api(answer)[0] == 200
    assert _api(answer)[0] == 200  # the same answer again: a retry, delivered again
    pipeline.finish(run_id)
    assert tool_messages(pipeline, 1) == ['{"text": "hello from the client"}', "Lyon, in May"]


def test_an_answer_that_comes_after_the_call_ended_unanswered_is_refused(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("ask_user", question="Which city?")]), Reply(content="ok"))
    run_id = pipeline.start("trip", agent="deferring")
    asked = waiting(pipeline)
    # As the next model step writes it when the task times out at the instant the answer comes.
    ended = ToolResult(
        seq=3,
        turn=asked["turn"],
        call_id=asked["call_id"],
        tool="ask_user",
        content="Error: the tool call did not complete (States.Timeout).",
        status="error",
        error_type=ErrorKind.NOT_COMPLETED,
    )
    table = boto3.resource("dynamodb", region_name=REGION).Table(TABLE)
    assert DynamoHistoryStore(table, boto3.client("s3", region_name=REGION), BUCKET).append(run_id, ended)

    status, refused = pipeline.runtime.api(
        "POST", f"/approvals/{asked['approval_id']}/answer", {"answer": "Lyon"}
    )
    assert (status, refused["message"]) == (
        409,
        f"approval {asked['approval_id']} is already expired: the first decision stands",
    )
    assert pipeline.runtime.api("GET", f"/approvals/{asked['approval_id']}")[1]["status"] == "expired"
    assert pipeline.runtime.api("POST", f"/runs/{run_id}/cancel")[0] == 200


def test_an_answer_whose_delivery_is_uncertain_stays_and_the_same_answer_delivers_it(
    pipeline: Pipeline,
) -> None:
    from tests.functional.test_approvals import AnswerLostOnce
    from toolpipe.shared.deferred.models import DeliveryUncertainError

    pipeline.script(Reply(tool_calls=[call("ask_user", question="Which city?")]), Reply(content="ok"))
    run_id = pipeline.start("trip", agent="deferring")
    approval_id = waiting(pipeline)["approval_id"]
    reporter = AnswerLostOnce(heard=False)
    service = _service(reporter)

    with pytest.raises(DeliveryUncertainError, match="recorded answered"):
        service.answer(approval_id, LOCAL_CALLER, "Lyon")
    assert service.get(approval_id, LOCAL_CALLER).status is ApprovalStatus.ANSWERED
    with pytest.raises(ApprovalAlreadyDecidedError):
        service.answer(approval_id, LOCAL_CALLER, "Paris")  # another answer: refused
    assert service.answer(approval_id, LOCAL_CALLER, "Lyon").status is ApprovalStatus.ANSWERED
    pipeline.finish(run_id)
    assert reporter.sent == ["lost", "success"]
    assert tool_messages(pipeline, 1) == ["Lyon"]
