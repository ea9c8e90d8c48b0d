"""`collector.paused`: the cyclic collector off for a block, then as it was."""

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from toolpipe.shared import collector


@pytest.fixture
def enabled_after() -> Iterator[None]:
    yield
    gc.enable()  # whatever a test left: the rest of the suite runs with it on


def test_the_collector_is_off_in_the_block_and_on_after(enabled_after: None) -> None:
    gc.enable()
    with collector.paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_block_that_raises_turns_it_back_on(enabled_after: None) -> None:
    gc.enable()
    with pytest.raises(ValueError), collector.paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_nested_blocks_turn_it_on_once_at_the_outermost(enabled_after: None) -> None:
    gc.enable()
    with collector.paused():
        with collector.paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_someone_else_turned_off_stays_off(enabled_after: None) -> None:
    gc.disable()
    with collector.paused():
        pass
    assert not gc.isenabled()


def test_what_is_dropped_in_a_cycle_meanwhile_is_collected_once_it_is_back_on(enabled_after: None) -> None:
    class Node:
        other: "Node"

    gc.enable()
    with collector.paused():
        a, b = Node(), Node()
        a.other, b.other = b, a
        del a, b
    assert gc.collect() >= 2  # the cycle waited, and is freed by the next pass


def test_keep_freezes_what_the_process_holds_and_not_after_an_error(enabled_after: None) -> None:
    gc.enable()
    frozen_before = gc.get_freeze_count()  # a runtime another test left up has frozen its own
    try:
        with pytest.raises(ValueError), collector.paused(keep=True):
            raise ValueError("boom")
        assert gc.get_freeze_count() == frozen_before
        with collector.paused(keep=True):
            kept = [object() for _ in range(1000)]
        assert gc.get_freeze_count() > frozen_before + len(kept)
        assert gc.isenabled()
    finally:
        if frozen_before == 0:  # give back only what this test froze
            gc.unfreeze()


def test_a_cold_start_keeps_what_it_built_on_lambda_only(
    enabled_after: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    gc.enable()
    frozen_before = gc.get_freeze_count()
    monkeypatch.delenv(collector.ON_LAMBDA, raising=False)
    with collector.cold_start():
        assert not gc.isenabled()
    assert gc.get_freeze_count() == frozen_before
    monkeypatch.setenv(collector.ON_LAMBDA, "/var/task")
    try:
        with collector.cold_start():
            pass
        assert gc.get_freeze_count() > frozen_before
    finally:
        if frozen_before == 0:
            gc.unfreeze()


def test_a_cold_built_service_is_built_once_with_the_collector_off(enabled_after: None) -> None:
    gc.enable()
    seen = []

    @collector.cold_built
    def service() -> object:
        seen.append(gc.isenabled())
        return object()

    assert service() is service()
    assert seen == [False] and gc.isenabled()


def test_a_cold_property_is_built_once_per_instance_with_the_collector_off(enabled_after: None) -> None:
    gc.enable()
    seen = []

    class Services:
        @collector.cold_property
        def starter(self) -> object:
            seen.append(gc.isenabled())
            return object()

    services = Services()
    assert services.starter is services.starter
    assert Services().starter is not services.starter
    assert seen == [False, False] and gc.isenabled()


def test_cold_starts_are_kept_while_a_keeper_is_up_and_not_after(
    enabled_after: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local runtime keeps its functions' cold starts as Lambda does, and its stop gives them back."""
    gc.enable()
    monkeypatch.delenv(collector.ON_LAMBDA, raising=False)
    frozen_before = gc.get_freeze_count()
    undo = collector.keep_cold_starts()
    try:
        with collector.cold_start():
            kept = [object() for _ in range(100)]
        assert gc.get_freeze_count() > frozen_before + len(kept)
    finally:
        undo()
        if frozen_before == 0:
            gc.unfreeze()
    frozen_after = gc.get_freeze_count()
    with collector.cold_start():
        pass
    assert gc.get_freeze_count() == frozen_after


def test_blocks_that_overlap_on_threads_keep_it_off_until_the_last_one_ends(enabled_after: None) -> None:
    """A local runtime's functions start cold at once, each in a block of its own: one ending
    must not turn the collector back on under another still building."""
    gc.enable()
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with collector.paused():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with collector.paused():
        thread.start()
        assert entered.wait(10)
    assert not gc.isenabled()  # ended here, the other block still runs
    release.set()
    thread.join(10)
    assert gc.isenabled()


class _Cycle:
    other: "_Cycle"


def _garbage_cycle() -> "weakref.ref[_Cycle]":
    a, b = _Cycle(), _Cycle()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_a_build_kept_frees_the_garbage_that_waited_rather_than_freezing_it(
    enabled_after: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API's first fork may come hours into an environment's life, with garbage waiting for
    a pass: freezing then would keep it for good."""
    gc.enable()
    monkeypatch.setenv(collector.ON_LAMBDA, "/var/task")
    frozen_before = gc.get_freeze_count()
    waiting = _garbage_cycle()

    @collector.cold_built
    def service() -> list[object]:
        return [object() for _ in range(100)]

    try:
        assert waiting() is not None  # a cycle: only a pass frees it
        built = service()
        assert waiting() is None
        assert gc.get_freeze_count() > frozen_before + len(built)
    finally:
        if frozen_before == 0:
            gc.unfreeze()
