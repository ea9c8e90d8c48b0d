"""Retention (issue 19, item 6): an ended run's items and objects expire together, nothing of a
running run does, and `DELETE /runs/{id}` removes a run (and its child runs) at once."""

import dataclasses
import threading
import time
from typing import Any

import pytest

from tests.conftest import TEST_AGENT, Pipeline, call
from tests.dynamo_faults import error_body, refused
from tests.functional.test_runs_api import _wait
from toolpipe.infra.cdk.functions import API
from toolpipe.infra.local.isolation import running_as
from toolpipe.infra.local.runtime import BUCKET, TABLE
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, Agent, agent_tool
from toolpipe.shared.dynamo import COUNTED_EXECUTION_PREFIX
from toolpipe.shared.history.retention import (
    RETAIN_UNTIL,
    RETENTION_TAG_KEY,
    RETENTION_TAG_VALUE,
    _unstamp,
    expire_run,
    keep_run,
)

BOB = "arn:aws:iam::000000000000:user/bob"
DAY = 86_400


def _items(pipeline: Pipeline) -> list[dict[str, Any]]:
    """Every item of every run: not the callers' quota counters (`QUOTA#`), which are the
    caller's, outlive a run and expire on their own."""
    found: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"TableName": TABLE}
    while True:
        page = pipeline.runtime.dynamodb.scan(**kwargs)
        found += [i for i in page["Items"] if not i["pk"]["S"].startswith("QUOTA#")]
        if "LastEvaluatedKey" not in page:
            return found
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _of_run(pipeline: Pipeline, run_id: str) -> list[dict[str, Any]]:
    """Every item of the run: its partition, and the records and tokens of its approvals."""
    items = _items(pipeline)
    approvals = {
        i["approval_id"]["S"] for i in items if i["pk"]["S"] == f"RUN#{run_id}" and "approval_id" in i
    }
    return [
        i
        for i in items
        if i["pk"]["S"] == f"RUN#{run_id}" or i["pk"]["S"].removeprefix("APPROVAL#") in approvals
    ]


def _objects(pipeline: Pipeline, run_id: str) -> list[str]:
    listed = pipeline.runtime.s3.list_objects_v2(Bucket=BUCKET, Prefix=f"runs/{run_id}/")
    return [o["Key"] for o in listed.get("Contents", [])]


def _tags(pipeline: Pipeline, key: str) -> dict[str, str]:
    tags = pipeline.runtime.s3.get_object_tagging(Bucket=BUCKET, Key=key)["TagSet"]
    return {t["Key"]: t["Value"] for t in tags}


def _stamps(pipeline: Pipeline, run_id: str) -> dict[str, int | None]:
    return {
        f"{i['pk']['S']}|{i['sk']['S']}": int(i[RETAIN_UNTIL]["N"]) if RETAIN_UNTIL in i else None
        for i in _of_run(pipeline, run_id)
    }


def _long_run(pipeline: Pipeline) -> str:
    """A run that stores objects: a result longer than the agent's limit and a long answer."""
    pipeline.script(Reply(tool_calls=[call("big_output", kilobytes=30)]), Reply(content="y" * 5000))
    run_id = pipeline.start("make it long")
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    return run_id


def test_an_ended_run_expires_whole_its_end_plus_the_retention(pipeline: Pipeline) -> None:
    before = int(time.time())
    run_id = _long_run(pipeline)
    stamps = _stamps(pipeline, run_id)
    assert {key.split("|")[1].split("#")[0] for key in stamps} >= {"META", "MSG", "CALL"}
    [until] = set(stamps.values())  # one expiry for all, none missing
    assert until is not None and before + 30 * DAY <= until <= int(time.time()) + 30 * DAY
    _, shown = pipeline.runtime.api("GET", f"/runs/{run_id}")
    assert shown["run"]["retain_until"] == until
    objects = _objects(pipeline, run_id)
    assert any("/results/" in k for k in objects) and f"runs/{run_id}/output.txt" in objects
    for key in objects:
        assert _tags(pipeline, key) == {RETENTION_TAG_KEY: RETENTION_TAG_VALUE}, key


def test_nothing_of_a_running_run_expires(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("slow", seconds=1.5)]), Reply(content="done"))
    run_id = pipeline.start("wait for it")
    _wait(lambda: any(k.endswith("|CALL#000003") for k in _stamps(pipeline, run_id)))
    assert set(_stamps(pipeline, run_id).values()) == {None}
    _, shown = pipeline.runtime.api("GET", f"/runs/{run_id}")
    assert shown["run"]["status"] == "running" and shown["run"]["retain_until"] is None
    pipeline.finish(run_id)
    assert None not in _stamps(pipeline, run_id).values()


def test_a_result_stored_after_a_cancel_expires_with_its_run(pipeline: Pipeline) -> None:
    """The cancel stamps what exists; the call still running stores its result (and ledger and
    state) after: its writer stamps them with the run's expiry."""
    pipeline.script(Reply(tool_calls=[call("slow", seconds=1.5)]), Reply(content="never asked"))
    run_id = pipeline.start("wait for it")
    _wait(lambda: any(k.endswith("|CALL#000003") for k in _stamps(pipeline, run_id)))
    assert pipeline.runtime.api("POST", f"/runs/{run_id}/cancel")[0] == 200
    # The result lands, then its writer reads the run and stamps it (and nothing is left out).

    def settled() -> dict[str, int | None] | None:
        stamps = _stamps(pipeline, run_id)
        return stamps if f"RUN#{run_id}|MSG#000003" in stamps and None not in stamps.values() else None

    stamps = _wait(settled)
    assert len(set(stamps.values())) == 1 and f"RUN#{run_id}|CALL#000003" in stamps, stamps


def test_a_reply_that_lands_after_its_run_was_cancelled_and_deleted_brings_no_record_back(
    pipeline: Pipeline,
) -> None:
    """A model call outlives its run: the run is cancelled and deleted while the model answers.
    The step then stores the reply (which expires, as anything written into a deleted run does)
    and counts the call on the run's record: that count must not write a record again, which
    would hold no status, never expire, and answer every read of the run with an error."""
    started = threading.Event()
    run: list[str] = []

    def cancel_and_delete_then_answer(request: dict[str, Any]) -> Reply:
        assert started.wait(30)
        [run_id] = run
        assert pipeline.runtime.api("POST", f"/runs/{run_id}/cancel")[0] == 200
        assert pipeline.runtime.api("DELETE", f"/runs/{run_id}") == (204, None)
        return Reply(content="too late")

    pipeline.model.responder = cancel_and_delete_then_answer
    run.append(pipeline.start("answer slowly"))
    started.set()
    _wait(lambda: len(pipeline.model.requests) == 1 and pipeline.runtime.tasks_in_progress() == 0)

    [run_id] = run
    assert pipeline.runtime.api("GET", f"/runs/{run_id}")[0] == 404
    left = _of_run(pipeline, run_id)
    # The reply, and no record. The stopped execution's count of its transitions may land
    # between the delete's read and its writes too (its ending is handled at once, as on AWS):
    # whatever is left of the run expires.
    kept = {i["sk"]["S"] for i in left}
    assert "MSG#000002" in kept and "META" not in kept, left
    assert kept <= {"MSG#000002", *(k for k in kept if k.startswith(COUNTED_EXECUTION_PREFIX))}, left
    assert all(RETAIN_UNTIL in i for i in left), left


def test_a_run_cancelled_while_its_model_answers_ends_at_once_and_the_late_reply_expires_with_it(
    pipeline: Pipeline,
) -> None:
    """As on AWS, a stop is the execution's ending: `ABORTED` as soon as the cancel answers, its
    ending handled (the execution's transitions counted, the run stamped again) while the step
    still waits on the model, and nothing of the stopped task recorded in its history. The
    reply then lands in an ended run whose stamping is done: the step stamps it itself."""
    asked, release = threading.Event(), threading.Event()

    def answer_when_released(request: dict[str, Any]) -> Reply:
        asked.set()
        assert release.wait(30)
        return Reply(tool_calls=[call("count_once", label="never")])

    pipeline.model.responder = answer_when_released
    run_id = pipeline.start("answer slowly")
    try:
        assert asked.wait(30)
        assert pipeline.runtime.api("POST", f"/runs/{run_id}/cancel")[0] == 200
        [execution] = pipeline.runtime.sfn.list_executions(
            stateMachineArn=pipeline.runtime.state_machine_arn
        )["executions"]
        assert execution["status"] == "ABORTED"  # at once: the step still waits on its model
        _wait(lambda: any(f"|{COUNTED_EXECUTION_PREFIX}" in key for key in _stamps(pipeline, run_id)))
        assert pipeline.runtime.tasks_in_progress() == 1 and f"RUN#{run_id}|MSG#000002" not in _stamps(
            pipeline, run_id
        )
    finally:
        release.set()
    _wait(lambda: pipeline.runtime.tasks_in_progress() == 0)

    events = pipeline.runtime.sfn.get_execution_history(
        executionArn=execution["executionArn"], maxResults=1000
    )["events"]
    assert events[-1]["type"] == "ExecutionAborted"
    assert [e["type"] for e in events].count("ExecutionAborted") == 1
    assert not [e for e in events if e["type"] in ("TaskSucceeded", "TaskStateExited")], events
    stamps = _stamps(pipeline, run_id)
    assert f"RUN#{run_id}|MSG#000002" in stamps  # the reply, stored after the ending was handled
    [until] = set(stamps.values())
    _, shown = pipeline.runtime.api("GET", f"/runs/{run_id}")
    assert until is not None and shown["run"]["retain_until"] == until
    assert shown["run"]["status"] == "cancelled" and shown["run"]["usage"]["model_calls"] == 1


@pytest.fixture
def helper(monkeypatch: pytest.MonkeyPatch) -> Agent:
    child = Agent(name="helper", instructions="You help.", tools=[TEST_AGENT.registry.get("big_output")])
    monkeypatch.setitem(AGENTS, "helper", child)
    parent = dataclasses.replace(AGENTS["tester"], tools=[*AGENTS["tester"].tools, agent_tool("helper")])
    monkeypatch.setitem(AGENTS, "tester", parent)
    return child


def test_delete_removes_the_run_and_its_child_runs_and_nothing_else(
    pipeline: Pipeline, helper: Agent
) -> None:
    other = _long_run(pipeline)
    kept_items, kept_objects = _of_run(pipeline, other), _objects(pipeline, other)
    pipeline.script(
        Reply(tool_calls=[call("helper", task="make it long")]),  # parent
        Reply(tool_calls=[call("big_output", kilobytes=30)]),  # child
        Reply(content="z" * 5000),  # child's answer, stored whole in S3
        Reply(content="done"),  # parent
    )
    run_id = pipeline.start("delegate")
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    [child] = [
        i["run_id"]["S"]
        for i in _items(pipeline)
        if i["sk"]["S"] == "META" and i["run_id"]["S"] not in (run_id, other)
    ]
    assert _objects(pipeline, child) and _of_run(pipeline, child)

    assert pipeline.runtime.api("DELETE", f"/runs/{run_id}") == (204, None)
    for gone in (run_id, child):
        assert _of_run(pipeline, gone) == [] and _objects(pipeline, gone) == []
        assert pipeline.runtime.api("GET", f"/runs/{gone}")[0] == 404
    left = {i["pk"]["S"] for i in _items(pipeline)}
    assert left == {f"RUN#{other}"}, left
    assert _of_run(pipeline, other) == kept_items and _objects(pipeline, other) == kept_objects
    # Twice: the run is not there any more.
    status, body = pipeline.runtime.api("DELETE", f"/runs/{run_id}")
    assert status == 404 and body["message"] == f"run {run_id} not found"
    _, listed = pipeline.runtime.api("GET", "/runs")
    assert [r["run_id"] for r in listed["runs"]] == [other]


def test_delete_refuses_a_running_run_and_one_not_the_callers(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("slow", seconds=1.5)]), Reply(content="done"))
    run_id = pipeline.start("wait for it")
    status, body = pipeline.runtime.api("DELETE", f"/runs/{run_id}")
    assert status == 409 and body["message"] == (
        f"run {run_id} cannot be deleted: it is still running; cancel it first"
    )
    pipeline.finish(run_id)
    assert pipeline.runtime.api("DELETE", f"/runs/{run_id}", caller=BOB)[0] == 404
    assert pipeline.runtime.api("DELETE", "/runs/nope")[0] == 404
    assert pipeline.runtime.api("DELETE", "/runs/bad.id")[0] == 400
    assert pipeline.runtime.api("DELETE", f"/runs/{run_id}", caller=None)[0] == 403
    assert pipeline.runtime.api("GET", f"/runs/{run_id}")[0] == 200  # none of these deleted it


def test_a_delete_that_fails_half_way_is_finished_by_the_next(pipeline: Pipeline) -> None:
    run_id = _long_run(pipeline)
    with running_as(pipeline.runtime.functions[API.name]):
        from toolpipe.functions.api import handler

        store: Any = handler.services.deleter._store  # the API's own store, its table's client
    invalid = error_body("ValidationException", "One or more parameter values were invalid.")
    with refused(store._table.meta.client, "BatchWriteItem", invalid):
        status, _ = pipeline.runtime.api("DELETE", f"/runs/{run_id}")
    assert status == 500
    assert _objects(pipeline, run_id) == []  # the objects went first
    status, shown = pipeline.runtime.api("GET", f"/runs/{run_id}")
    assert status == 200 and shown["run"]["status"] == "succeeded"  # the record goes last
    assert pipeline.runtime.api("DELETE", f"/runs/{run_id}") == (204, None)
    assert _of_run(pipeline, run_id) == []


def test_the_local_table_declares_the_stacks_ttl(pipeline: Pipeline) -> None:
    ttl = pipeline.runtime.dynamodb.describe_time_to_live(TableName=TABLE)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": RETAIN_UNTIL}


def test_a_runs_approvals_expire_and_are_deleted_with_it(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An approval's record and task token live outside the run's partition, found from its
    gate: they get the run's expiry when it ends, and go with it when it is deleted."""
    from tests.e2e.test_approvals import GATED, pending

    monkeypatch.setitem(AGENTS, GATED.name, GATED)
    pipeline.script(Reply(tool_calls=[call("wire_money", amount=250, to="ana")]), Reply(content="paid"))
    run_id = pipeline.start("pay", agent="gated")
    approval = pending(pipeline)
    assert pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")[0] == 200
    pipeline.finish(run_id)
    stamps = _stamps(pipeline, run_id)
    approval_keys = {f"APPROVAL#{approval['approval_id']}|{sk}" for sk in ("APPROVAL", "TOKEN")}
    assert approval_keys | {f"RUN#{run_id}|GATE#000003"} <= set(stamps)
    assert len(set(stamps.values())) == 1 and None not in stamps.values(), stamps

    assert pipeline.runtime.api("DELETE", f"/runs/{run_id}") == (204, None)
    assert _items(pipeline) == []
    assert pipeline.runtime.api("GET", f"/approvals/{approval['approval_id']}")[0] == 404
    assert pipeline.runtime.api("GET", "/approvals?status=approved")[1]["approvals"] == []


def test_an_ending_that_died_while_stamping_is_finished_by_the_next(pipeline: Pipeline) -> None:
    """The record is ended (and stamped) first; the rest of the run is stamped after. A crash in
    between leaves items without expiry until the retried step, or any other writer that finds
    the run ended, stamps them."""
    from botocore.exceptions import ClientError

    from toolpipe.infra.cdk.functions import ORCHESTRATOR
    from toolpipe.shared.messages import AssistantMessage, RunRecord, RunStatus, UserMessage

    with running_as(pipeline.runtime.functions[ORCHESTRATOR.name]):
        from toolpipe.functions.orchestrator import handler

        store: Any = handler.service()._store
        record = RunRecord(run_id="dies-1", agent="tester", status=RunStatus.RUNNING)
        assert store.create_run(record, UserMessage(seq=1, turn=0, content="hi"))
        assert store.append("dies-1", AssistantMessage(seq=2, turn=1, content="done"))
        invalid = error_body("ValidationException", "One or more parameter values were invalid.")
        with refused(store._table.meta.client, "Query", invalid), pytest.raises(ClientError):
            store.finish_run("dies-1", RunStatus.SUCCEEDED, output="done")
        stamps = _stamps(pipeline, "dies-1")
        assert stamps["RUN#dies-1|META"] is not None and stamps["RUN#dies-1|MSG#000002"] is None
        assert not store.finish_run("dies-1", RunStatus.FAILED, error="a retry")  # ended: stamps the rest
    stamps = _stamps(pipeline, "dies-1")
    assert len(set(stamps.values())) == 1 and None not in stamps.values(), stamps


def test_a_deleted_run_stays_deleted_after_the_local_runtime_restarts(tmp_path: Any) -> None:
    """The local state journal replays deletes too: `toolpipe serve` brings no deleted run back."""
    from tests.conftest import _pipeline

    for first in _pipeline(state_dir=tmp_path):
        kept, gone = _long_run(first), _long_run(first)
        assert first.runtime.api("DELETE", f"/runs/{gone}") == (204, None)
    for again in _pipeline(state_dir=tmp_path):
        assert again.runtime.api("GET", f"/runs/{gone}")[0] == 404
        assert _of_run(again, gone) == [] and _objects(again, gone) == []
        assert again.runtime.api("GET", f"/runs/{kept}")[0] == 200 and _objects(again, kept)


def _store(pipeline: Pipeline) -> Any:
    """The orchestrator's store, as its function holds it: its table, bucket and S3 client."""
    from toolpipe.infra.cdk.functions import ORCHESTRATOR

    with running_as(pipeline.runtime.functions[ORCHESTRATOR.name]):
        from toolpipe.functions.orchestrator import handler

        return handler.service()._store


def _limited_with_all_kinds(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    """A run that ended `limit` with an approval, two objects and messages, all stamped: its id
    and stamp. Its last reply, a 2-second `slow` call, waits for a resume."""
    from tests.e2e.test_approvals import GATED, pending

    agent = dataclasses.replace(GATED, name="kept", max_tool_calls=3)
    monkeypatch.setitem(AGENTS, agent.name, agent)
    pipeline.script(
        Reply(tool_calls=[call("wire_money", amount=250, to="ana")]),
        Reply(tool_calls=[call("big_output", kilobytes=30), call("big_output", kilobytes=31)]),
        Reply(tool_calls=[call("slow", seconds=2)]),  # over max_tool_calls: the run ends `limit`
        Reply(content="done"),
    )
    run_id = pipeline.start("pay", agent=agent.name)
    assert pipeline.runtime.api("POST", f"/approvals/{pending(pipeline)['approval_id']}/approve")[0] == 200
    assert pipeline.finish(run_id)["run"]["status"] == "limit"
    stamps = _stamps(pipeline, run_id)
    assert any(k.startswith("APPROVAL#") for k in stamps) and None not in stamps.values(), stamps
    [until] = set(stamps.values())
    assert until is not None and len(_objects(pipeline, run_id)) >= 2
    return run_id, until


def _kept(pipeline: Pipeline, run_id: str) -> bool:
    """Nothing of the run expires: no item stamped (its record included), no object tagged."""
    return set(_stamps(pipeline, run_id).values()) == {None} and all(
        _tags(pipeline, key) == {} for key in _objects(pipeline, run_id)
    )


def test_a_resumed_run_expires_in_nothing_until_it_ends_again(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resumed execution's first step takes back the stamps and tags the run's ending gave
    (the approval's record and token among them): nothing of a running run expires, however
    close its old stamp was. An ending that was still stamping when the resume landed takes
    back what it stamped after; one that stamps after the next ending writes the next's stamp.
    A pool from two writes on, so that a few items and objects take the threads a large run takes."""
    from toolpipe.shared.history import retention

    monkeypatch.setattr(retention, "STAMP_THREADS", 1)
    run_id, until = _limited_with_all_kinds(pipeline, monkeypatch)
    status, body = pipeline.runtime.api("POST", f"/runs/{run_id}/resume", {"limits": {"max_tool_calls": 5}})
    assert status == 202, body
    _wait(lambda: _kept(pipeline, run_id))  # while the resumed run runs its 2-second call
    store = _store(pipeline)
    expire_run(store._table, store._s3, store._bucket, run_id, until)  # the late ending's stamping
    assert _kept(pipeline, run_id)
    assert pipeline.runtime.api("GET", f"/runs/{run_id}")[1]["run"]["status"] == "running"

    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    stamps = _stamps(pipeline, run_id)
    [again] = set(stamps.values())
    assert again is not None and again >= until
    expire_run(store._table, store._s3, store._bucket, run_id, until - DAY)  # a stale ending, later
    keep_run(store._table, store._s3, store._bucket, run_id)  # a late take-back, its objects last
    assert set(_stamps(pipeline, run_id).values()) == {again}
    for key in _objects(pipeline, run_id):
        assert _tags(pipeline, key) == {RETENTION_TAG_KEY: RETENTION_TAG_VALUE}, key


def test_taking_back_an_expiry_leaves_a_later_endings_stamp(pipeline: Pipeline) -> None:
    """Each item loses only the stamp it was read with: an ending that stamps it meanwhile wins."""
    store = _store(pipeline)
    key = {"pk": "RUN#later", "sk": "MSG#000001"}
    store._table.put_item(Item={**key, RETAIN_UNTIL: 200})
    _unstamp(store._table, [(key, 100), ({"pk": "RUN#later", "sk": "MSG#000002"}, 100)])
    assert store._table.get_item(Key=key)["Item"][RETAIN_UNTIL] == 200
    assert "Item" not in store._table.get_item(Key={"pk": "RUN#later", "sk": "MSG#000002"})  # not made
    _unstamp(store._table, [(key, 200)])
    assert RETAIN_UNTIL not in store._table.get_item(Key=key)["Item"]


def test_a_resume_whose_execution_a_restart_hands_on_is_still_taken_back(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`toolpipe serve` stopped after the resume's write, before its execution ran a step: the
    restart hands the run to the next execution, whose steps take the ending's expiry back."""
    from toolpipe.shared.runs import ports

    run_id, _ = _limited_with_all_kinds(pipeline, monkeypatch)
    with monkeypatch.context() as died:
        died.setattr(ports.StepFunctionsStarter, "start", lambda self, *args, **kwargs: None)
        status, body = pipeline.runtime.api(
            "POST", f"/runs/{run_id}/resume", {"limits": {"max_tool_calls": 5}}
        )
        assert status == 202, body
    assert not _kept(pipeline, run_id)
    pipeline.runtime._resume_runs()  # what the restart does
    _wait(lambda: _kept(pipeline, run_id))
    run = pipeline.finish(run_id)["run"]
    assert run["status"] == "succeeded" and run["execution"] == 3
