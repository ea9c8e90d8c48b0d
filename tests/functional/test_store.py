"""The history store on moto: per-run state round trip."""

from tests.conftest import Pipeline


def _store():  # type: ignore[no-untyped-def]
    from functions.orchestrator import handler

    return handler.service()._store


def test_state_keys_are_set_and_removed_independently(pipeline: Pipeline) -> None:
    store = _store()
    store.save_state("s-1", {"a": 1, "b": [1, 2], "c": "x"}, [])
    store.save_state("s-1", {"b": [1, 2, 3]}, ["c"])  # one call's changes
    store.save_state("s-1", {"d": {"k": True}}, [])  # another call's, in parallel
    assert store.load_state("s-1") == {"a": 1, "b": [1, 2, 3], "d": {"k": True}}
    store.save_state("s-1", {}, [])  # nothing changed: nothing written
    assert store.load_state("other") == {}


def test_a_run_record_with_nested_numbers_reads_back_as_plain_ints(pipeline: Pipeline) -> None:
    from shared.messages import ParentCall, RunRecord, RunStatus, UserMessage

    parent = ParentCall(run_id="p", call_id="c", seq=3, turn=1, tool="helper")
    record = RunRecord(
        run_id="child-1", agent="tester", status=RunStatus.RUNNING, parent=parent, tools=["count_once"]
    )
    assert _store().create_run(record, UserMessage(seq=1, turn=0, content="task"))

    loaded = _store().get_run("child-1")
    assert loaded.parent == parent and type(loaded.parent.seq) is int
    assert loaded.tools == ["count_once"]
