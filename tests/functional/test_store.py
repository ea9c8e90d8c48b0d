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
