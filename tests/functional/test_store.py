"""The history store on moto: per-run state round trip."""

import pytest
from botocore.exceptions import ClientError

from tests.conftest import Pipeline
from tests.dynamo_faults import cancellation_body, refused
from toolpipe.infra.cdk.functions import ORCHESTRATOR
from toolpipe.infra.local.isolation import running_as
from toolpipe.infra.local.runtime import TABLE
from toolpipe.shared.history import ClaimState
from toolpipe.shared.history.errors import RunNotFoundError
from toolpipe.shared.history.ports import Appended
from toolpipe.shared.messages import RunRecord, RunStatus, ToolResult, UserMessage


def _store(p: Pipeline):  # type: ignore[no-untyped-def]
    """The orchestrator's store, built as that function: its handler reads its settings from the
    function's environment, which a test outside an invocation does not see."""
    with running_as(p.runtime.functions[ORCHESTRATOR.name]):
        from toolpipe.functions.orchestrator import handler

        return handler.service()._store


def _result(seq: int, content: str = "ok") -> ToolResult:
    return ToolResult(seq=seq, turn=1, call_id=f"c{seq}", tool="t", content=content, status="ok")


def test_state_keys_are_set_and_removed_independently(pipeline: Pipeline) -> None:
    store = _store(pipeline)
    for seq, changes in enumerate(
        [({"a": 1, "b": [1, 2], "c": "x"}, []), ({"b": [1, 2, 3]}, ["c"]), ({"d": {"k": True}}, [])], start=3
    ):
        claim = store.claim_call("s-1", seq, lease_seconds=60)
        assert store.complete_call("s-1", _result(seq), claim.owner, changes)
    assert store.load_state("s-1") == {"a": 1, "b": [1, 2, 3], "d": {"k": True}}
    assert store.load_state("other") == {}


def test_the_ledger_moves_from_claimed_to_done_once(pipeline: Pipeline) -> None:
    store = _store(pipeline)
    first = store.claim_call("l-1", 3, lease_seconds=60)
    assert first.state is ClaimState.NEW and first.attempt == 1
    assert store.claim_call("l-1", 3, lease_seconds=60).state is ClaimState.BUSY  # live lease
    assert not store.complete_call("l-1", _result(3), "not-the-owner")  # a stale delivery: refused
    assert store.get_item("l-1", 3) is None
    assert store.complete_call("l-1", _result(3, "first"), first.owner, ({"k": 1}, []))
    assert store.claim_call("l-1", 3, lease_seconds=60).state is ClaimState.DONE
    assert not store.complete_call("l-1", _result(3, "second"), first.owner)  # the slot is taken
    assert store.get_item("l-1", 3).content == "first" and store.load_state("l-1") == {"k": 1}


def test_a_claim_whose_lease_ran_out_is_taken_over_by_one_delivery(pipeline: Pipeline) -> None:
    store = _store(pipeline)
    vanished = store.claim_call("l-2", 3, lease_seconds=-1)
    taken = store.claim_call("l-2", 3, lease_seconds=60)
    assert taken.state is ClaimState.TAKEN_OVER and taken.attempt == 2
    assert store.claim_call("l-2", 3, lease_seconds=60).state is ClaimState.BUSY
    assert not store.complete_call("l-2", _result(3), vanished.owner)  # the vanished one came back
    assert store.complete_call("l-2", _result(3), taken.owner)


def test_a_release_frees_only_the_owners_claim(pipeline: Pipeline) -> None:
    store = _store(pipeline)
    claim = store.claim_call("l-3", 3, lease_seconds=60)
    store.release_call("l-3", 3, "someone-else")
    assert store.claim_call("l-3", 3, lease_seconds=60).state is ClaimState.BUSY
    store.release_call("l-3", 3, claim.owner)
    assert store.claim_call("l-3", 3, lease_seconds=60).state is ClaimState.NEW


def test_a_throttled_run_creation_is_an_error_not_a_run_that_exists(pipeline: Pipeline) -> None:
    """`False` would tell the starter the run id is taken: an idempotent start would then replay
    a run that was never written, and a child run would be started without its record."""
    store = _store(pipeline)
    record = RunRecord(run_id="c-1", agent="tester", status=RunStatus.RUNNING)
    first = UserMessage(seq=1, turn=0, content="hi")
    throttled = cancellation_body("ThrottlingError", "None", "None")  # record, first message, cost counters
    with refused(store._table.meta.client, "TransactWriteItems", throttled), pytest.raises(ClientError):
        store.create_run(record, first)
    with pytest.raises(RunNotFoundError):
        store.get_run("c-1")
    assert store.create_run(record, first)
    assert not store.create_run(record, first)  # now it exists: a condition of ours said no


def test_a_long_answer_is_stored_by_reference(pipeline: Pipeline) -> None:
    store = _store(pipeline)
    record = RunRecord(run_id="o-1", agent="tester", status=RunStatus.RUNNING)
    assert store.create_run(record, UserMessage(seq=1, turn=0, content="hi"))
    answer = "a" * 600_000  # past DynamoDB's 400 KB item limit
    assert store.finish_run("o-1", RunStatus.SUCCEEDED, output=answer, error="e" * 50_000)
    run = store.get_run("o-1")
    assert run.output_chars == 600_000 and run.output == answer[: len(run.output or "")]
    assert run.output_ref is not None and store.get_result(run.output_ref) == answer
    assert len(run.error or "") < 5_000
    assert not store.finish_run("o-1", RunStatus.FAILED, error="later")  # a run ends once


def test_a_run_record_with_nested_numbers_reads_back_as_plain_ints(pipeline: Pipeline) -> None:
    from toolpipe.shared.messages import ParentCall

    parent = ParentCall(run_id="p", call_id="c", seq=3, turn=1, tool="helper")
    record = RunRecord(
        run_id="child-1", agent="tester", status=RunStatus.RUNNING, parent=parent, tools=["count_once"]
    )
    assert _store(pipeline).create_run(record, UserMessage(seq=1, turn=0, content="task"))

    loaded = _store(pipeline).get_run("child-1")
    assert loaded.parent == parent and type(loaded.parent.seq) is int
    assert loaded.tools == ["count_once"]


def test_counting_a_model_call_answers_with_the_trees_totals(pipeline: Pipeline) -> None:
    from toolpipe.shared.messages import Usage

    store = _store(pipeline)
    for run_id, root in (("tree-root", None), ("tree-child", "tree-root")):
        record = RunRecord(run_id=run_id, agent="assistant", status=RunStatus.RUNNING, root_run_id=root)
        assert store.create_run(record, UserMessage(seq=1, turn=0, content="go"))
    assert store.record_model_call("tree-root", 1, Usage(prompt_tokens=10, model_calls=1)) == Usage(
        prompt_tokens=10, model_calls=1
    )
    # A child's call is counted in its own record and in its root's tree: the answer is the tree's.
    assert store.record_model_call(
        "tree-child", 1, Usage(prompt_tokens=5, model_calls=1), "tree-root"
    ) == Usage(prompt_tokens=15, model_calls=2)
    assert (
        store.record_model_call("tree-child", 1, Usage(prompt_tokens=5, model_calls=1), "tree-root") is None
    )
    assert store.get_run("tree-root").tree_usage == Usage(prompt_tokens=15, model_calls=2)
    assert store.get_run("tree-child").tree_usage is None  # a child's tree is its root's
    assert store.get_run("tree-child").usage == Usage(prompt_tokens=5, model_calls=1)


def test_a_run_that_is_gone_gets_no_record_back_from_a_count_or_an_execution(pipeline: Pipeline) -> None:
    """An update writes the item it does not find: counting a call, or naming the next execution,
    of a run deleted meanwhile (a step outliving a cancel and a delete) must not make a record of
    counters alone, which has no status, never expires and fails every read of the run."""
    from toolpipe.shared.messages import Usage

    store = _store(pipeline)
    for run_id, root in (("gone-root", None), ("gone-child", "gone-root")):
        record = RunRecord(run_id=run_id, agent="assistant", status=RunStatus.RUNNING, root_run_id=root)
        assert store.create_run(record, UserMessage(seq=1, turn=0, content="go"))
        assert store.finish_run(run_id, RunStatus.CANCELLED)
    assert not store.set_execution("gone-child", 2, 1)  # ended: no execution follows
    resumed = RunRecord(run_id="moved-on", agent="assistant", status=RunStatus.RUNNING, execution=3)
    assert store.create_run(resumed, UserMessage(seq=1, turn=0, content="go"))
    assert not store.set_execution("moved-on", 3, 1)  # a step of execution 2: the run is past it
    assert store.set_execution("moved-on", 4, 1) and store.get_run("moved-on").execution == 4
    store.delete_run("gone-root")
    assert store.record_model_call("gone-child", 1, Usage(model_calls=1), "gone-root") is None
    # Counted in the child's own record, which is there still; not in its deleted root's tree.
    assert _store(pipeline).get_run("gone-child").usage == Usage(model_calls=1)
    store.delete_run("gone-child")
    assert store.record_model_call("gone-child", 2, Usage(model_calls=1), "gone-root") is None
    assert not store.set_execution("gone-child", 2, 1)
    for run_id in ("gone-root", "gone-child"):
        key = {"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "META"}}
        assert "Item" not in pipeline.runtime.dynamodb.get_item(TableName=TABLE, Key=key)


def test_a_reply_is_stored_and_counted_in_two_requests_and_stamped_when_its_run_ended_meanwhile(
    pipeline: Pipeline,
) -> None:
    """A model step's reply: its append and its count are two writes, and the count's answer
    (the record as it is after) says whether the run ended or went meanwhile, which the append
    would otherwise read the record again to learn. A reply stored after its run's end carries
    the run's expiry; one stored after its delete, its own; a reply whose slot is taken, nothing."""
    from toolpipe.shared.messages import AssistantMessage, Usage

    store = _store(pipeline)
    client = store._table.meta.client
    sent: list[str] = []

    def count(model: object, **_: object) -> None:
        sent.append(str(getattr(model, "name", model)))

    for run_id in ("reply-running", "reply-ended", "reply-deleted"):
        record = RunRecord(run_id=run_id, agent="assistant", status=RunStatus.RUNNING)
        assert store.create_run(record, UserMessage(seq=1, turn=0, content="go"))
    assert store.finish_run("reply-ended", RunStatus.CANCELLED)
    assert store.finish_run("reply-deleted", RunStatus.CANCELLED)
    store.delete_run("reply-deleted")
    until = int(_store(pipeline).get_run("reply-ended").retain_until or 0)

    def reply(turn: int = 1) -> AssistantMessage:
        return AssistantMessage(seq=2, turn=turn, content="hi", usage=Usage(prompt_tokens=3, model_calls=1))

    def stamp(run_id: str) -> int | None:
        key = {"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "MSG#000002"}}
        item = pipeline.runtime.dynamodb.get_item(TableName=TABLE, Key=key)["Item"]
        return int(item["retain_until"]["N"]) if "retain_until" in item else None

    client.meta.events.register("before-call.dynamodb", count)
    try:
        appended = store.append_reply("reply-running", reply())
    finally:
        client.meta.events.unregister("before-call.dynamodb", count)
    assert appended.appended and appended.tree == Usage(prompt_tokens=3, model_calls=1)
    assert sent == ["PutItem", "UpdateItem"] and stamp("reply-running") is None
    assert store.append_reply("reply-running", reply(turn=2)) == Appended(False, None)  # slot taken

    assert store.append_reply("reply-ended", reply()).appended
    assert until and stamp("reply-ended") == until
    assert store.append_reply("reply-deleted", reply()) == Appended(True, None)
    assert (stamp("reply-deleted") or 0) >= until  # it expires: `retention_days` after it was written
    key = {"pk": {"S": "RUN#reply-deleted"}, "sk": {"S": "META"}}
    assert "Item" not in pipeline.runtime.dynamodb.get_item(TableName=TABLE, Key=key)

    # A reply at a free slot of a turn counted already: the count is refused, and the refusal
    # answers with the record as it is (ALL_OLD): stamped when the run has ended, not when it runs.
    for run_id in ("counted-running", "counted-ended"):
        record = RunRecord(run_id=run_id, agent="assistant", status=RunStatus.RUNNING)
        assert store.create_run(record, UserMessage(seq=1, turn=0, content="go"))
        assert store.record_model_call(run_id, 1, Usage(model_calls=1)) is not None
    assert store.finish_run("counted-ended", RunStatus.CANCELLED)
    ended_until = _store(pipeline).get_run("counted-ended").retain_until
    assert store.append_reply("counted-running", reply()) == Appended(True, None)
    assert store.append_reply("counted-ended", reply()) == Appended(True, None)
    assert stamp("counted-running") is None and ended_until and stamp("counted-ended") == ended_until


def test_runs_are_listed_from_the_caller_index_page_by_page(pipeline: Pipeline) -> None:
    from toolpipe.shared.history.errors import InvalidCursorError

    store = _store(pipeline)
    for i in range(7):
        record = RunRecord(
            run_id=f"r{i}",
            agent="a" if i % 3 else "b",
            status=RunStatus.RUNNING,
            caller="alice" if i != 5 else "bob",
            created_at=f"2026-11-22T10:00:0{i}.000+00:00",
            metadata={"n": str(i)},
        )
        assert store.create_run(record, UserMessage(seq=1, turn=0, content="go"))
    store.finish_run("r4", RunStatus.SUCCEEDED, output="ok")

    def every(caller: str | None, **filters: object) -> list[str]:
        seen, cursor = [], None
        while True:
            runs, cursor = store.list_runs(caller, limit=2, start=cursor, **filters)  # type: ignore[arg-type]
            assert len(runs) <= 2
            seen += [r.run_id for r in runs]
            if cursor is None:
                return seen

    assert every("alice") == ["r6", "r4", "r3", "r2", "r1", "r0"]
    assert every("alice", agent="a") == ["r4", "r2", "r1"]
    assert every("alice", status=RunStatus.SUCCEEDED) == ["r4"]
    assert sorted(every(None)) == [f"r{i}" for i in range(7)]
    # A scan's read stops in the middle of runs' messages (1,000 items a read on AWS): its cursor
    # is then a message's key, and the listing goes on from it.
    import toolpipe.shared.history.run_records as store_module

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store_module, "SCAN_READ_ITEMS", 3)
        patch.setattr(store_module, "LIST_READ_FACTOR", 1)
        for i in range(7):
            store.append(f"r{i}", UserMessage(seq=2, turn=1, content="more"))
        assert sorted(every(None)) == [f"r{i}" for i in range(7)]
    runs, cursor = store.list_runs("alice", limit=1)
    assert runs[0].metadata == {"n": "6"} and runs[0].status is RunStatus.RUNNING
    # The index entry keeps the status current: the listing shows how each run stands.
    assert store.list_runs("alice", limit=2, start=cursor)[0][0].status is RunStatus.SUCCEEDED
    assert cursor is not None
    with pytest.raises(InvalidCursorError):
        store.list_runs("bob", start=cursor)
    with pytest.raises(InvalidCursorError):
        store.list_runs(None, start=cursor)  # an index cursor is not a scan's


def test_a_scan_that_stops_on_a_quota_counter_or_an_approval_goes_on_from_it(pipeline: Pipeline) -> None:
    """The admin's listing of every run walks the whole table: its read may stop on any item,
    a caller's quota counter or an approval included, and the cursor it gives must be taken."""
    import toolpipe.shared.history.run_records as store_module
    from toolpipe.shared.history.ports import Admission

    store = _store(pipeline)
    for i in range(3):
        admission = Admission(
            caller=f"caller-{i}",
            window=1,
            window_expires_at=180,
            starts_per_minute=5,
            running=5,
            retry_after={"starts_per_minute": 1, "running": 1},
        )
        record = RunRecord(run_id=f"q{i}", agent="a", status=RunStatus.RUNNING, caller=f"caller-{i}")
        assert store.create_run(record, UserMessage(seq=1, turn=0, content="go"), admission)
    pipeline.runtime.dynamodb.put_item(
        TableName="toolpipe-local", Item={"pk": {"S": "APPROVAL#" + "a" * 32}, "sk": {"S": "APPROVAL"}}
    )
    stops = set()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store_module, "SCAN_READ_ITEMS", 1)
        patch.setattr(store_module, "LIST_READ_FACTOR", 1)
        seen, cursor = [], None
        while True:
            runs, cursor = store.list_runs(None, limit=1, start=cursor)
            seen += [r.run_id for r in runs]
            if cursor is None:
                break
            stops.add(cursor["pk"].split("#")[0])
    assert sorted(seen) == ["q0", "q1", "q2"]
    assert {"QUOTA", "APPROVAL"} <= stops
