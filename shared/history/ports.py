"""What the run services need from storage, as small ports.

`DynamoHistoryStore` implements them all on one DynamoDB table and one S3 bucket;
`MemoryHistoryStore` implements them in memory, for unit tests of `shared/runs`.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from toolpipe.shared.costs.operations import Operations
from toolpipe.shared.messages import (
    AssistantMessage,
    HandoffRecord,
    HistoryItem,
    RunRecord,
    RunStatus,
    RunSummary,
    ToolResult,
    Usage,
)

# Answers longer than this stay in the run record only as their beginning; the whole answer
# goes to S3. DynamoDB items stop at 400 KB, and the record also holds the error and usage.
OUTPUT_INLINE_CHARS = 4_000
# Where a listing goes on: the last run's keys, as the store gave them (opaque to callers).
Cursor = dict[str, str]
# A listing with a filter reads at most this many times its page size before answering with
# what it found and a cursor: a selective filter never turns one request into a table walk.
LIST_READ_FACTOR = 5

# Errors come from tools, models and Step Functions: bounded so the record always fits.
ERROR_MAX_CHARS = 4_000


@dataclass(frozen=True)
class Admission:
    """What a start counts against its caller's quotas (shared/runs/quota.py), written in the
    same transaction as the run: a run is counted if and only if it was created. A limit of
    None is not counted at all."""

    caller: str
    window: int  # the minute the start falls in (seconds since the epoch // 60)
    window_expires_at: int  # when the minute's counter may go (a TTL, seconds since the epoch)
    starts_per_minute: int | None
    running: int | None
    # What a refusal tells the caller to wait, in seconds, by quota.
    retry_after: dict[str, int]


class RunRecords(Protocol):
    """The run record: status, usage, answer."""

    def create_run(self, record: RunRecord, first: HistoryItem, admission: Admission | None = None) -> bool:
        """Write the record and its first message together; False if the run exists. With an
        `admission`, also count the start in the caller's minute and take a running slot, or
        raise `QuotaExceededError` (nothing written) when either is full. A run that exists
        (an idempotent retry) is never counted again."""
        ...

    def get_run(self, run_id: str) -> RunRecord:
        """The record, or `RunNotFoundError`."""
        ...

    def record_model_call(
        self, run_id: str, turn: int, used: Usage, root_run_id: str | None = None
    ) -> Usage | None:
        """Add one model call's usage to the run, and to its root's tree totals; once per turn
        (a retried step that records the same turn again changes nothing, and gets None).
        Returns the tree's totals just after the call was counted."""
        ...

    def tree_usage(self, root_run_id: str) -> Usage:
        """What a root run and all its child runs used together."""
        ...

    def finish_run(
        self, run_id: str, status: RunStatus, output: str | None = None, error: str | None = None
    ) -> bool:
        """End a running run; False (and nothing changed) if it had already ended. A run that
        held a running slot gives it back (once: only the ending that changed the status does)."""
        ...

    def set_execution(self, run_id: str, execution: int, start_turn: int) -> bool:
        """Record which execution of the run is current (the one after the execution the
        record names), and the turn it starts after; False, with nothing changed, when the run
        is no longer running, no longer there, or names another execution."""
        ...

    def resume_run(self, run: RunRecord, resumed: RunRecord, admission: Admission | None = None) -> bool:
        """Make the ended `run` running again as `resumed` (its status, next execution, its turn,
        limits, deadline and resumes) if its status and execution are still `run`'s; False, with
        nothing changed, when another writer got there first. With an `admission`, the run takes
        a running slot of its caller's in the same write (`QuotaExceededError`, nothing changed,
        when they are full); a resume is not a start, so starts a minute are not counted. The
        record no longer expires; the rest of the run, after `keep_resumed`."""
        ...

    def keep_resumed(self, run_id: str, execution: int) -> None:
        """Take back the expiry an ending gave the items and objects of a run that a resume into
        `execution` or before made run again, once (each step of a resumed run asks; after the
        first that did it, a read). Nothing for an ended run, or one resumed since `execution`."""
        ...

    def add_fork(self, run_id: str, fork_id: str) -> None:
        """List `fork_id` among the run's forks (`RunRecord.forks`); again, nothing changes."""
        ...

    def expire_ended(self, run_id: str) -> None:
        """Give an ended run's items and objects the expiry its record holds, where an ending
        that died half-way left some without (nothing for a running run). `finish_run` does it
        for the ending it records."""
        ...

    def delete_run(self, run_id: str) -> None:
        """Remove every item and stored object of the run now, its record last (so a delete that
        dies half-way is finished by the next). The caller checks the run has ended."""
        ...

    def record_handoffs(self, run_id: str, handoffs: list[HandoffRecord], active: str, known: int) -> bool:
        """Bring the record's agents up to date: the run's handoffs so far and the agent answering
        now, if the record still lists `known` handoffs and the run is running. False (nothing
        changed) when another step got there first."""
        ...

    def list_runs(
        self,
        caller: str | None,
        *,
        status: RunStatus | None = None,
        agent: str | None = None,
        limit: int = 100,
        start: Cursor | None = None,
    ) -> tuple[list[RunSummary], Cursor | None]:
        """`caller`'s runs, newest first (None: every run, in no set order), and the cursor of
        the next page, or None at the end. A page may hold fewer than `limit` runs when a
        filter is set. A `start` this listing did not give raises `InvalidCursorError`."""
        ...


class RunningSlots(Protocol):
    """The runs holding a caller's running slots (the `running` quota), for repairs."""

    def running_slots(self, caller: str) -> list[str]:
        """The run ids holding `caller`'s slots."""
        ...

    def release_slots(self, caller: str, run_ids: list[str]) -> None:
        """Give back the slots of `run_ids` that are not running (ended or gone): a run resumed
        since it was read as ended has taken its slot again and keeps it. Ids holding none are
        ignored."""
        ...

    def get_runs(self, run_ids: list[str]) -> dict[str, RunRecord]:
        """The records of `run_ids` that exist, by id (consistent reads)."""
        ...


class History(Protocol):
    """A run's messages: append-only, one per history slot."""

    def load_history(self, run_id: str) -> list[HistoryItem]:
        """Every item of the run, in slot order. An adapter may keep items it has read (they
        never change), but must return an item written since into any slot it found empty."""
        ...

    def get_item(self, run_id: str, seq: int) -> HistoryItem | None: ...

    def append(self, run_id: str, item: HistoryItem) -> bool:
        """Write at `item.seq`; False if the slot is taken (a retry or a duplicate)."""
        ...

    def iter_history(self, run_id: str, after: int = 0, page_size: int | None = 100) -> Iterator[HistoryItem]:
        """The items after slot `after`, read page by page as they are consumed."""
        ...

    def stored_message_key(self, run_id: str, seq: int) -> str | None:
        """The S3 key of an item stored there (too large for DynamoDB), else None."""
        ...


class ClaimState(StrEnum):
    NEW = "new"  # this delivery owns the call; nothing ran before
    TAKEN_OVER = "taken_over"  # an earlier delivery claimed it and vanished: it may have run
    BUSY = "busy"  # another delivery holds a live claim
    DONE = "done"  # the outcome is stored: answer from it


@dataclass(frozen=True)
class Claim:
    state: ClaimState
    owner: str = ""  # this delivery's claim token, for `complete_call`
    attempt: int = 0  # how many deliveries have claimed the call, this one included


class CallLedger(Protocol):
    """Exactly-once bookkeeping of tool calls, keyed by history slot: CLAIMED -> DONE."""

    def claim_call(self, run_id: str, seq: int, lease_seconds: int) -> Claim:
        """Claim the call for this delivery. A claim whose lease ran out is taken over."""
        ...

    def complete_call(
        self,
        run_id: str,
        result: ToolResult,
        owner: str,
        state_changes: tuple[dict[str, Any], list[str]] = ({}, []),
    ) -> bool:
        """In one transaction: store the result, mark the call DONE, save the tool's state
        changes. False (nothing written) if the slot is taken or the claim is not `owner`'s."""
        ...

    def release_call(self, run_id: str, seq: int, owner: str) -> None:
        """Give up a claim before anything ran, so a redelivery runs the call at once."""
        ...


class Contents(Protocol):
    """Whole contents kept out of the model's context and out of DynamoDB items."""

    def put_result(self, run_id: str, seq: int, content: str) -> str: ...

    def get_result(self, key: str) -> str: ...


class SharedStates(Protocol):
    """The per-run state tools share (`ToolContext.state`)."""

    def load_state(self, run_id: str) -> dict[str, Any]: ...


class ParentTokens(Protocol):
    """The task token a child run answers its parent's call with; kept apart from the record."""

    def put_parent_token(self, run_id: str, token: str) -> None: ...

    def get_parent_token(self, run_id: str) -> str | None: ...


@dataclass(frozen=True)
class CallRead:
    """What a tool call's delivery reads first: the run, the reply that asked for the call,
    and the call's result slot (None while no result is stored)."""

    run: RunRecord
    reply: HistoryItem | None
    result: HistoryItem | None
    # The call's approval gate (`sk=GATE#<seq>`, shared/deferred/store.py) as stored, read in
    # the same request; None when the call was not gated.
    gate: dict[str, Any] | None = None


class CallReads(Protocol):
    def load_call(self, run_id: str, reply_seq: int, seq: int) -> CallRead:
        """The run record and the two slots, read together (consistently); `RunNotFoundError`
        if the run does not exist."""
        ...


class RunCosts(Protocol):
    """The operations a run made (shared/costs): counters created with the run, only added to."""

    def add_costs(self, run_id: str, ops: Operations) -> bool:
        """Add `ops` to the run's counters; False (nothing written) when the run is gone."""
        ...

    def get_costs(self, run_id: str) -> Operations:
        """The run's counters so far (all zero for a run that has none)."""
        ...

    def count_execution(self, run_id: str, execution: str, transitions: int) -> bool:
        """Add an ended execution's state transitions once: False when that execution was
        counted already, or the run is gone."""
        ...


@dataclass(frozen=True)
class Appended:
    """A model reply's append (`HistoryStore.append_reply`): whether it took its slot, and the
    tree's totals once its call was counted (None: counted before, or to be read when needed)."""

    appended: bool
    tree: Usage | None


def reply_usage(reply: AssistantMessage) -> Usage:
    """What a reply's model call is counted as: its usage, or one call of its tool calls."""
    return reply.usage or Usage(model_calls=1, tool_calls=len(reply.tool_calls))


class HistoryStore(
    RunRecords,
    RunningSlots,
    History,
    CallLedger,
    CallReads,
    Contents,
    SharedStates,
    ParentTokens,
    RunCosts,
    Protocol,
):
    """Everything the run services store."""

    def append_reply(self, run_id: str, reply: AssistantMessage, root_run_id: str | None = None) -> Appended:
        """`append` the model's reply, then `record_model_call` its call: nothing counted when
        its slot was taken (another invocation's reply is there: count that one)."""
        ...
