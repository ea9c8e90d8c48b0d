"""A run's timeline: what the timeline page draws, built from what the run stored.

Pure: from the run record, its history, the approvals of its calls and its child runs, one
bounded document. Turns down the side (each model call's start and end, tokens and cost), the
tool calls of each turn as bars in time (parallel calls overlap), the waits for a person with
who decided, handoffs and child runs with links, errors and "in doubt" marked.

Bounded whatever the run holds: the page is one Lambda response (6 MB) and a browser has to draw
it. Texts are previews (never whole arguments or results, which `GET /runs/{id}/messages/{seq}`
serves), a turn shows at most `MAX_CALLS_PER_TURN` calls, the latest `MAX_TURNS` turns are kept,
and earlier turns are dropped until the JSON fits `BUDGET_BYTES`. Never a task token or an
approval link: an `Approval` holds no token, and its `callback_url` is not read here.

Text from models, tools and callers is shown as text by the page (never as HTML); here it also
loses the characters that would reorder what is around it (bidi controls, CVE-2021-42574
"Trojan Source"), which are shown by their code point instead, and other control characters.
"""

import re
import urllib.parse
from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from toolpipe.shared.deferred.models import Approval, ApprovalKind, ApprovalStatus
from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.messages import (
    AssistantMessage,
    HistoryItem,
    RunRecord,
    RunStatus,
    ToolResult,
    UserMessage,
)
from toolpipe.shared.runs.calls import result_slot
from toolpipe.shared.runs.report import json_size, message_link

# Preview lengths, in characters: enough to recognise a call on a bar's tooltip, not a document.
ARGUMENTS_CHARS = 200
RESULT_CHARS = 300
CONTENT_CHARS = 500
NAME_CHARS = 100  # tool and agent names, call ids, who decided: short by contract, cut anyway
# A model may ask for hundreds of calls in one reply; a row draws this many.
MAX_CALLS_PER_TURN = 64
# The latest turns of a long run: where a live run is.
MAX_TURNS = 200
# The timeline's JSON, at most: well under a Lambda response (6 MB) with the page around it.
BUDGET_BYTES = 1_000_000

# Explicit directional formatting characters (Unicode UAX #9, 2.1-2.2) and marks: each can make
# text render in another order than it is stored.
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_HIDDEN = re.compile(f"[{_BIDI}]|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str, limit: int) -> str:
    """`text` cut to `limit` characters (an ellipsis says so), every bidi control shown as its
    code point (`<U+202E>`) and other control characters as `?`: it reads in the order it is
    stored, whatever it holds."""

    def shown(match: re.Match[str]) -> str:
        char = match.group()
        return f"<U+{ord(char):04X}>" if char in _BIDI else "?"

    cut = text[:limit]
    return _HIDDEN.sub(shown, cut) + ("…" if len(text) > limit else "")


class Wait(BaseModel):
    """A call that waited for a person (or for the caller's program): from when it began waiting
    until it was decided, or until now while it waits."""

    kind: ApprovalKind
    status: ApprovalStatus
    start: str
    end: str | None = Field(description="When it was decided or answered; null while it waits.")
    decided_by: str | None = None
    decided_by_authenticated: bool | None = None
    reason: str | None = Field(default=None, description="A denial's reason (a preview).")
    edited: bool = Field(default=False, description="Approved with arguments a person edited.")


class RunLink(BaseModel):
    """Another run (a child run an agent tool started, or the parent run of this one)."""

    run_id: str
    agent: str | None = None
    status: RunStatus | None = None
    tool: str | None = None
    page: str = Field(description="Its timeline page, relative to this one.")


class CallBar(BaseModel):
    seq: int = Field(description="The call's history slot (its result's seq).")
    call_id: str
    tool: str
    arguments: str = Field(description="A preview of the arguments as the model sent them.")
    arguments_chars: int
    status: Literal["ok", "error", "pending"]
    error_type: str | None = None
    in_doubt: bool = Field(description="It may or may not have had its effect (a crash mid-call).")
    attempts: int | None = None
    start: str | None = Field(description="When the delivery that ran it took it; null if nothing ran it.")
    end: str | None = Field(description="When its result was stored; null while it has none.")
    duration_ms: int | None = None
    result: str | None = Field(default=None, description="A preview of the result.")
    result_chars: int | None = None
    message: str = Field(description="Where the whole call and result are: `GET` this (API path).")
    wait: Wait | None = None
    child: RunLink | None = None
    handoff: str | None = Field(default=None, description="`transfer to <agent>` or `escalate`.")


class TurnRow(BaseModel):
    turn: int
    seq: int = Field(description="The model reply's history slot.")
    agent: str
    start: str | None = Field(
        description="When the model call began; null in runs stored before it was kept."
    )
    end: str = Field(description="When the reply was stored.")
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = Field(default=None, description="The model call's cost.")
    content: str | None = Field(default=None, description="A preview of the reply's text.")
    content_chars: int = 0
    calls: list[CallBar]
    calls_omitted: int = Field(default=0, description="Calls of this reply not shown (over the cap).")


class HandoffMark(BaseModel):
    turn: int
    kind: Literal["transfer", "escalate"]
    from_agent: str
    to_agent: str


class RunHeader(BaseModel):
    run_id: str
    agent: str
    status: RunStatus
    created_at: str
    updated_at: str
    ended_at: str | None = None
    duration_ms: int | None = Field(description="Start to end; null while it runs.")
    input: str = Field(description="A preview of the run's input.")
    error: str | None = None
    prompt_tokens: int
    completion_tokens: int
    model_calls: int
    cost_usd: float = Field(description="The model's cost, as the run counted it.")
    parent: RunLink | None = None


class Timeline(BaseModel):
    """`GET /runs/{run_id}/timeline`: what the run's timeline page draws, bounded."""

    run: RunHeader
    turns: list[TurnRow] = Field(description="Model replies in order, each with its calls.")
    turns_omitted: int = Field(description="Earlier turns not shown (over the count or the size cap).")
    handoffs: list[HandoffMark]
    children: list[RunLink]


def build_timeline(
    record: RunRecord,
    history: Iterable[HistoryItem],
    approvals: Iterable[Approval] = (),
    children: Iterable[RunRecord] = (),
) -> Timeline:
    """The run's timeline (see the module's docstring for its bounds)."""
    items = list(history)
    results = {i.seq: i for i in items if isinstance(i, ToolResult)}
    waits = _latest_approvals(record.run_id, approvals)
    kids = {c.parent.seq: c for c in children if c.parent is not None and c.parent.run_id == record.run_id}
    replies = [i for i in items if isinstance(i, AssistantMessage)]
    kept = replies[-MAX_TURNS:]
    rows = [_row(record, reply, results, waits, kids) for reply in kept]
    header = _header(record, items)
    handoffs = [
        HandoffMark(**h.model_dump(include={"turn", "kind", "from_agent", "to_agent"}))
        for h in record.handoffs
    ]
    child_links = [_child(c) for c in sorted(kids.values(), key=lambda c: c.created_at)][:MAX_TURNS]
    fixed = json_size(header.model_dump(mode="json")) + sum(
        json_size(x.model_dump(mode="json")) for x in (*handoffs, *child_links)
    )
    rows = _within(rows, BUDGET_BYTES - fixed)
    return Timeline(
        run=header,
        turns=rows,
        turns_omitted=len(replies) - len(rows),
        handoffs=handoffs[-MAX_TURNS:],
        children=child_links,
    )


def _within(rows: list[TurnRow], budget: int) -> list[TurnRow]:
    """The latest rows whose JSON fits `budget` (the last one always: a page shows where the run is)."""
    kept: list[TurnRow] = []
    used = 0
    for row in reversed(rows):
        size = json_size(row.model_dump(mode="json"))
        if kept and used + size > budget:
            break
        kept.append(row)
        used += size
    return kept[::-1]


def _latest_approvals(run_id: str, approvals: Iterable[Approval]) -> dict[int, Approval]:
    latest: dict[int, Approval] = {}
    for approval in approvals:
        if approval.run_id != run_id:
            continue
        seen = latest.get(approval.seq)
        if seen is None or approval.created_at > seen.created_at:
            latest[approval.seq] = approval
    return latest


def _header(record: RunRecord, items: list[HistoryItem]) -> RunHeader:
    first = next((i for i in items if isinstance(i, UserMessage)), None)
    ended = record.status is not RunStatus.RUNNING
    parent = record.parent
    return RunHeader(
        run_id=record.run_id,
        agent=visible(record.agent, NAME_CHARS),
        status=record.status,
        created_at=record.created_at,
        updated_at=record.updated_at,
        ended_at=record.updated_at if ended else None,
        duration_ms=elapsed_ms(record.created_at, record.updated_at) if ended else None,
        input=visible(first.content, CONTENT_CHARS) if first else "",
        error=visible(record.error, CONTENT_CHARS) if record.error else None,
        prompt_tokens=record.usage.prompt_tokens,
        completion_tokens=record.usage.completion_tokens,
        model_calls=record.usage.model_calls,
        cost_usd=record.usage.cost_micro_usd / 1_000_000,
        parent=RunLink(run_id=parent.run_id, tool=visible(parent.tool, NAME_CHARS), page=_page(parent.run_id))
        if parent
        else None,
    )


def _row(
    record: RunRecord,
    reply: AssistantMessage,
    results: dict[int, ToolResult],
    waits: dict[int, Approval],
    kids: dict[int, RunRecord],
) -> TurnRow:
    calls = [
        _bar(record.run_id, reply, index, results.get(slot), waits.get(slot), kids.get(slot))
        for index in range(min(len(reply.tool_calls), MAX_CALLS_PER_TURN))
        for slot in [result_slot(reply, index)]
    ]
    usage = reply.usage
    return TurnRow(
        turn=reply.turn,
        seq=reply.seq,
        agent=visible(reply.agent or record.agent, NAME_CHARS),
        start=reply.started_at,
        end=reply.created_at,
        prompt_tokens=usage.prompt_tokens if usage else None,
        completion_tokens=usage.completion_tokens if usage else None,
        cost_usd=usage.cost_micro_usd / 1_000_000 if usage else None,
        content=visible(reply.content, CONTENT_CHARS) if reply.content else None,
        content_chars=len(reply.content or ""),
        calls=calls,
        calls_omitted=max(0, len(reply.tool_calls) - MAX_CALLS_PER_TURN),
    )


def _bar(
    run_id: str,
    reply: AssistantMessage,
    index: int,
    result: ToolResult | None,
    approval: Approval | None,
    child: RunRecord | None,
) -> CallBar:
    call = reply.tool_calls[index]
    slot = result_slot(reply, index)
    bar = CallBar(
        seq=slot,
        call_id=visible(call.id, NAME_CHARS),
        tool=visible(call.name, NAME_CHARS),
        arguments=visible(call.arguments, ARGUMENTS_CHARS),
        arguments_chars=len(call.arguments),
        status="pending",
        in_doubt=False,
        start=None,
        end=None,
        message=message_link(run_id, result.seq if result else reply.seq),
        wait=_wait(approval) if approval else None,
        child=_child(child) if child else None,
    )
    if result is None:
        return bar
    handoff = result.handoff
    return bar.model_copy(
        update={
            "status": result.status,
            "error_type": result.error_type,
            "in_doubt": result.error_type == ErrorKind.IN_DOUBT,
            "attempts": result.attempts,
            "start": result.started_at,
            "end": result.created_at,
            "duration_ms": result.duration_ms,
            "result": visible(result.content, RESULT_CHARS),
            "result_chars": result.full_result_chars or len(result.content),
            "handoff": None
            if handoff is None
            else "escalate"
            if handoff.kind == "escalate"
            else f"transfer to {visible(handoff.agent or '?', NAME_CHARS)}",
        }
    )


def _wait(approval: Approval) -> Wait:
    return Wait(
        kind=approval.kind,
        status=approval.status,
        start=approval.created_at,
        end=approval.decided_at,
        decided_by=visible(approval.decided_by, NAME_CHARS) if approval.decided_by else None,
        decided_by_authenticated=approval.decided_by_authenticated,
        reason=visible(approval.reason, RESULT_CHARS) if approval.reason else None,
        edited=approval.arguments is not None,
    )


def _child(child: RunRecord) -> RunLink:
    return RunLink(
        run_id=child.run_id,
        agent=visible(child.agent, NAME_CHARS),
        status=child.status,
        tool=visible(child.parent.tool, NAME_CHARS) if child.parent else None,
        page=_page(child.run_id),
    )


def _page(run_id: str) -> str:
    # Relative to a timeline page (`/ui/runs/{id}`): right under any stage or host.
    return urllib.parse.quote(run_id, safe="")


def elapsed_ms(start: str, end: str) -> int:
    """Milliseconds from `start` to `end` (ISO 8601 timestamps), 0 if the clock went back."""
    return max(0, round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds() * 1000))
