"""The timeline builder (shared/runs/timeline.py): what the timeline page draws, from what a run
stored, bounded whatever the run holds."""

import json

import pytest

from toolpipe.shared.deferred.models import Approval, ApprovalKind, ApprovalStatus
from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.history import MemoryHistoryStore
from toolpipe.shared.history.errors import RunNotFoundError
from toolpipe.shared.messages import (
    AssistantMessage,
    HandoffAction,
    HandoffRecord,
    HistoryItem,
    ParentCall,
    RunRecord,
    RunStatus,
    ToolCall,
    ToolResult,
    Usage,
    UserMessage,
)
from toolpipe.shared.runs import timeline
from toolpipe.shared.runs.report import json_size
from toolpipe.shared.runs.timeline import build_timeline, visible
from toolpipe.shared.runs.timeline_reader import TimelineReader

RUN = "run1"
T0 = "2026-11-26T10:00:00.000+00:00"


def at(seconds: float) -> str:
    return f"2026-11-26T10:00:{seconds:06.3f}+00:00"


def record(**fields: object) -> RunRecord:
    values: dict[str, object] = {
        "run_id": RUN,
        "agent": "triage",
        "status": RunStatus.SUCCEEDED,
        "caller": "ana",
        "created_at": T0,
        "updated_at": at(9),
    }
    return RunRecord.model_validate(values | fields)


def reply(
    seq: int, turn: int, *calls: tuple[str, str], start: float, end: float, **fields: object
) -> AssistantMessage:
    return AssistantMessage(
        seq=seq,
        turn=turn,
        tool_calls=[
            ToolCall(id=f"c{seq}_{i}", name=name, arguments=args) for i, (name, args) in enumerate(calls)
        ],
        started_at=at(start),
        created_at=at(end),
        usage=Usage(prompt_tokens=100 * turn, completion_tokens=10, model_calls=1, cost_micro_usd=1500),
        **fields,  # type: ignore[arg-type]
    )


def result(seq: int, turn: int, start: float, end: float, **fields: object) -> ToolResult:
    values: dict[str, object] = {
        "seq": seq,
        "turn": turn,
        "call_id": f"c{seq}",
        "tool": "lookup",
        "content": "found",
        "status": "ok",
        "started_at": at(start),
        "created_at": at(end),
        "duration_ms": round((end - start) * 1000),
    }
    return ToolResult.model_validate(values | fields)


def approval(seq: int, **fields: object) -> Approval:
    values: dict[str, object] = {
        "approval_id": "a" * 32,
        "run_id": RUN,
        "seq": seq,
        "message_seq": seq - 1,
        "turn": 1,
        "call_id": f"c{seq}",
        "tool": "refund",
        "arguments_sha256": "0" * 64,
        "arguments_preview": "{}",
        "requester": "ana",
        "status": ApprovalStatus.APPROVED,
        "created_at": at(2),
        "expires_at": at(59),
        "decided_by": "arn:aws:iam::1:user/bo",
        "decided_at": at(5),
    }
    return Approval.model_validate(values | fields)


def history() -> list[HistoryItem]:
    return [
        UserMessage(seq=1, turn=0, content="Refund order 7", created_at=T0),
        reply(2, 1, ("lookup", '{"order": 7}'), ("refund", '{"order": 7}'), start=0.5, end=1),
        result(3, 1, 1.1, 2.0),
        result(
            4,
            1,
            5.1,
            6.0,
            tool="refund",
            content="Error: crashed mid-call",
            status="error",
            error_type=ErrorKind.IN_DOUBT,
            attempts=2,
        ),
        reply(5, 2, start=6.1, end=7, content="Refunded."),
    ]


def test_turns_calls_in_time_waits_and_cost_per_turn() -> None:
    built = build_timeline(record(), history(), [approval(4)])

    assert [(t.turn, t.seq, t.start, t.end) for t in built.turns] == [
        (1, 2, at(0.5), at(1)),
        (2, 5, at(6.1), at(7)),
    ]
    first = built.turns[0]
    assert (first.prompt_tokens, first.completion_tokens, first.cost_usd) == (100, 10, 0.0015)
    lookup, refund = first.calls
    # Each bar runs from when the delivery took the call to when its result was stored.
    assert (lookup.seq, lookup.tool, lookup.status, lookup.start, lookup.end) == (
        3,
        "lookup",
        "ok",
        at(1.1),
        at(2),
    )
    assert lookup.wait is None and not lookup.in_doubt
    assert refund.in_doubt and refund.status == "error" and refund.attempts == 2
    assert refund.wait is not None
    assert (refund.wait.start, refund.wait.end, refund.wait.status) == (at(2), at(5), ApprovalStatus.APPROVED)
    assert refund.wait.decided_by == "arn:aws:iam::1:user/bo" and refund.wait.decided_by_authenticated
    assert built.turns[1].content == "Refunded." and built.turns[1].calls == []
    assert built.run.duration_ms == 9000 and built.run.input == "Refund order 7"
    assert built.turns_omitted == 0


def test_a_call_without_a_result_is_pending_and_a_waiting_one_is_open() -> None:
    items = history()[:3]
    waiting = approval(
        4, status=ApprovalStatus.PENDING, decided_by=None, decided_at=None, kind=ApprovalKind.HUMAN
    )
    built = build_timeline(record(status=RunStatus.RUNNING), items, [waiting])

    refund = built.turns[0].calls[1]
    assert (refund.status, refund.start, refund.end) == ("pending", None, None)
    assert refund.wait is not None and refund.wait.end is None and refund.wait.kind is ApprovalKind.HUMAN
    assert built.run.duration_ms is None and built.run.ended_at is None


def test_an_approval_of_another_run_is_not_shown() -> None:
    built = build_timeline(record(), history(), [approval(4, run_id="other")])
    assert built.turns[0].calls[1].wait is None


def test_handoffs_and_child_runs_are_linked() -> None:
    items = history()
    items[2] = result(3, 1, 1.1, 2.0, handoff=HandoffAction(kind="transfer", agent="billing", by="model"))
    child = RunRecord(
        run_id="child9",
        agent="researcher",
        status=RunStatus.FAILED,
        parent=ParentCall(run_id=RUN, call_id="c4", seq=4, turn=1, tool="research"),
    )
    handed = record(
        handoffs=[HandoffRecord(turn=1, kind="transfer", from_agent="triage", to_agent="billing")]
    )
    built = build_timeline(handed, items, children=[child])

    assert built.turns[0].calls[0].handoff == "transfer to billing"
    assert built.turns[0].calls[1].child is not None and built.turns[0].calls[1].child.page == "child9"
    assert [(c.run_id, c.status, c.tool) for c in built.children] == [
        ("child9", RunStatus.FAILED, "research")
    ]
    assert [(h.turn, h.to_agent) for h in built.handoffs] == [(1, "billing")]
    as_child = build_timeline(child, [UserMessage(seq=1, turn=0, content="dig")])
    assert as_child.run.parent is not None and as_child.run.parent.page == RUN


def test_texts_are_previews_with_bidi_controls_shown_not_applied() -> None:
    hostile = "<script>alert(1)</script>\u202etxt.exe\u2066x\u2069\x00\x1b[31m" + "A" * 5_000_000
    items: list[HistoryItem] = [
        UserMessage(seq=1, turn=0, content=hostile),
        reply(2, 1, ("echo", json.dumps({"text": hostile})), start=0.5, end=1, content=hostile),
        result(3, 1, 1.1, 2, content=hostile, tool="echo"),
    ]
    built = build_timeline(record(error=hostile), items)
    texts = [
        built.run.input,
        built.run.error,
        built.turns[0].content,
        *(getattr(built.turns[0].calls[0], f) for f in ("arguments", "result")),
    ]
    for text in texts:
        assert text is not None and len(text) < 700
        assert not any(c in text for c in "\u202e\u2066\u2069\x00\x1b")
    assert built.run.input.startswith("<script>alert(1)</script><U+202E>txt.exe<U+2066>x<U+2069>??[31m")
    call = built.turns[0].calls[0]
    assert call.arguments_chars == len(json.dumps({"text": hostile})) and call.result_chars == len(hostile)
    assert call.message == f"/runs/{RUN}/messages/3"
    assert visible("short", 10) == "short" and visible("abcdef", 3) == "abc…"


def test_a_huge_run_is_bounded_by_count_and_bytes() -> None:
    calls = [("lookup", json.dumps({"n": i, "pad": "x" * 300})) for i in range(100)]
    items: list[HistoryItem] = [UserMessage(seq=1, turn=0, content="go")]
    seq = 2
    for turn in range(1, 301):
        items.append(reply(seq, turn, *calls, start=0.1, end=0.2))
        seq += 1 + len(calls)
    built = build_timeline(record(), items)

    assert all(len(t.calls) == timeline.MAX_CALLS_PER_TURN and t.calls_omitted == 36 for t in built.turns)
    assert json_size(built.model_dump(mode="json")) <= timeline.BUDGET_BYTES + 10_000
    # The latest turns are kept: where a live run is.
    assert built.turns[-1].turn == 300 and built.turns_omitted == 300 - len(built.turns) > 0


def test_the_reader_shows_a_run_to_its_caller_only() -> None:
    store = MemoryHistoryStore()
    store.create_run(record(status=RunStatus.RUNNING), UserMessage(seq=1, turn=0, content="hi"))

    class NoApprovals:
        def for_run(self, run_id: str, limit: int) -> list[Approval]:
            return []

    reader = TimelineReader(store, NoApprovals(), admin_principal="admin")
    assert reader.timeline(RUN, "ana").run.status is RunStatus.RUNNING
    assert reader.timeline(RUN, "admin").run.run_id == RUN
    with pytest.raises(RunNotFoundError):
        reader.timeline(RUN, "mallory")
    [row] = reader.runs("ana").runs
    assert (row.run_id, row.status, row.duration_ms) == (RUN, RunStatus.RUNNING, None)
    assert reader.runs("mallory").runs == []
