"""Cancelling runs and listing them, on the in-memory store (the DynamoDB store: functional tests)."""

import base64
import json
from typing import Any

import pytest

from toolpipe.shared.agents import AGENTS, Agent, agent_tool
from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.history import MemoryHistoryStore
from toolpipe.shared.history.errors import InvalidCursorError, RunNotFoundError
from toolpipe.shared.messages import (
    AssistantMessage,
    ParentCall,
    RunRecord,
    RunStatus,
    ToolCall,
    ToolCallMessage,
    ToolResult,
    UserMessage,
)
from toolpipe.shared.runs import ToolCallExecutor
from toolpipe.shared.runs.cancel import RunCanceller
from toolpipe.shared.runs.children import child_run_id
from toolpipe.shared.runs.errors import RunEndedError
from toolpipe.shared.runs.report import RunReader, decode_cursor, encode_cursor
from toolpipe.shared.tools import tool

RAN: list[str] = []


@tool
def work(label: str) -> str:
    """Do some work.

    Args:
        label: Any text.
    """
    RAN.append(label)
    return "done"


class Stopper:
    def __init__(self) -> None:
        self.stopped: list[tuple[str, int]] = []

    def stop(self, run_id: str, execution: int, cause: str) -> None:
        self.stopped.append((run_id, execution))


class Reporter:
    def succeed(self, token: str, output: dict[str, Any]) -> bool:
        return True

    def heartbeat(self, token: str) -> bool:
        return True


class Starter:
    def __init__(self) -> None:
        self.started: list[str] = []

    def start(
        self, run_id: str, execution: int = 1, deadline: str | None = None, waits: str = "count"
    ) -> None:
        self.started.append(run_id)


@pytest.fixture(autouse=True)
def agents(monkeypatch: pytest.MonkeyPatch) -> None:
    RAN.clear()
    monkeypatch.setitem(AGENTS, "worker", Agent(name="worker", instructions="Work.", tools=[work]))
    monkeypatch.setitem(
        AGENTS, "boss", Agent(name="boss", instructions="Delegate.", tools=[work, agent_tool("worker")])
    )


def _run(store: MemoryHistoryStore, run_id: str, agent: str = "boss", **fields: Any) -> RunRecord:
    record = RunRecord(run_id=run_id, agent=agent, status=RunStatus.RUNNING, caller="alice", **fields)
    assert store.create_run(record, UserMessage(seq=1, turn=0, content="go"))
    return record


def _delegating(store: MemoryHistoryStore, parent: str) -> str:
    """The parent asked its `worker` agent tool; the child run it started, running."""
    call = ToolCall(id="c", name="worker", arguments='{"task": "t"}')
    store.append(parent, AssistantMessage(seq=2, turn=1, tool_calls=[call]))
    child = child_run_id(parent, 3)
    _run(
        store,
        child,
        agent="worker",
        parent=ParentCall(run_id=parent, call_id="c", seq=3, turn=1, tool="worker"),
        root_run_id=parent,
        depth=1,
    )
    return child


def test_cancel_marks_and_stops_the_run_and_its_children_once() -> None:
    store, stopper = MemoryHistoryStore(), Stopper()
    _run(store, "p")
    child = _delegating(store, "p")
    canceller = RunCanceller(store, stopper)

    record, replayed = canceller.cancel("p", "alice")
    assert record.status is RunStatus.CANCELLED and not replayed
    assert store.get_run(child).status is RunStatus.CANCELLED
    assert stopper.stopped == [("p", 1), (child, 1)]
    # Again: the same answer, its executions stopped again (a first cancel may have died half-way).
    again, replayed = canceller.cancel("p", "alice")
    assert again == record and replayed
    # Nothing later overwrites it: an ending of any kind is refused.
    assert not store.finish_run("p", RunStatus.FAILED, error="execution aborted")
    assert store.get_run("p").status is RunStatus.CANCELLED


def test_cancel_refuses_ended_unknown_and_foreign_runs() -> None:
    store = MemoryHistoryStore()
    _run(store, "done")
    store.finish_run("done", RunStatus.SUCCEEDED, output="ok")
    canceller = RunCanceller(store, Stopper(), admin_principal="admin")
    with pytest.raises(RunEndedError, match="already ended"):
        canceller.cancel("done", "alice")
    with pytest.raises(RunNotFoundError):
        canceller.cancel("nope", "alice")
    _run(store, "mine")
    with pytest.raises(RunNotFoundError):
        canceller.cancel("mine", "mallory")
    assert canceller.cancel("mine", "admin").record.status is RunStatus.CANCELLED


def test_a_worker_runs_nothing_for_a_cancelled_run() -> None:
    store = MemoryHistoryStore()
    _run(store, "r", agent="worker")
    store.append(
        "r",
        AssistantMessage(
            seq=2, turn=1, tool_calls=[ToolCall(id="c", name="work", arguments='{"label": "x"}')]
        ),
    )
    store.finish_run("r", RunStatus.CANCELLED)
    executor = ToolCallExecutor(store, Reporter(), Starter(), heartbeat_every=60, sleep=lambda s: None)

    outcome = executor.execute(ToolCallMessage(run_id="r", seq=3, message_seq=2, task_token="t"), 60)

    assert outcome is not None and outcome.status == "error" and RAN == []
    result = store.get_item("r", 3)
    assert isinstance(result, ToolResult) and result.error_type is ErrorKind.RUN_CANCELLED
    assert store.get_run("r").status is RunStatus.CANCELLED


def test_a_child_started_after_its_parent_was_cancelled_never_runs() -> None:
    """The worker delegating a call read the parent as running; the cancel came before the child."""
    from toolpipe.shared.runs import children

    store, starter = MemoryHistoryStore(), Starter()
    parent = _run(store, "p")
    call = ToolCall(id="c", name="worker", arguments='{"task": "t"}')
    reply = AssistantMessage(seq=2, turn=1, tool_calls=[call])
    store.append("p", reply)
    RunCanceller(store, Stopper()).cancel("p", "alice")

    child = children.start_child(store, starter, parent, reply, call, 3, "worker", "t", "token")

    assert starter.started == [] and store.get_run(child).status is RunStatus.CANCELLED


def test_runs_are_listed_newest_first_with_tokens_only_their_listing_takes() -> None:
    store = MemoryHistoryStore()
    for i in range(5):
        _run(
            store, f"r{i}", agent="boss" if i % 2 else "worker", created_at=f"2026-11-22T10:00:0{i}.000+00:00"
        )
    _run(store, "bob1", created_at="2026-11-22T11:00:00.000+00:00").model_copy()
    store.runs["bob1"] = store.runs["bob1"].model_copy(update={"caller": "bob"})
    store.finish_run("r3", RunStatus.SUCCEEDED, output="ok")
    reader = RunReader(store, presign=lambda key: key, admin_principal="admin")

    page = reader.list_runs("alice", limit=2)
    assert [r["run_id"] for r in page["runs"]] == ["r4", "r3"] and page["next"]
    rest = reader.list_runs("alice", limit=10, token=page["next"])
    assert [r["run_id"] for r in rest["runs"]] == ["r2", "r1", "r0"] and rest["next"] is None
    assert [r["run_id"] for r in reader.list_runs("alice", agent="boss")["runs"]] == ["r3", "r1"]
    assert [r["run_id"] for r in reader.list_runs("alice", status=RunStatus.SUCCEEDED)["runs"]] == ["r3"]
    # A token never names a caller: Alice's, in Bob's listing, reads none of her runs. One edited
    # to name a partition, or to point at another run than its position, is refused; so is garbage.
    assert "alice" not in base64.urlsafe_b64decode(page["next"] + "==").decode()
    assert reader.list_runs("bob", token=page["next"])["runs"] == []
    cursor = decode_cursor(page["next"], "alice")
    assert cursor["gsi1pk"] == "CALLER#alice" and encode_cursor(cursor) == page["next"]
    forged = base64.urlsafe_b64encode(json.dumps({**cursor, "gsi1pk": "CALLER#bob"}).encode()).decode()
    moved = encode_cursor({**cursor, "pk": "RUN#bob1"})
    for token in (forged, moved, "not-base64!", "e30"):
        with pytest.raises(InvalidCursorError):
            reader.list_runs("bob", token=token)
    with pytest.raises(PermissionError):
        reader.list_runs("alice", owner="bob")
    assert [r["run_id"] for r in reader.list_runs("admin", owner="bob")["runs"]] == ["bob1"]
    assert len(reader.list_runs("admin", every=True)["runs"]) == 6
