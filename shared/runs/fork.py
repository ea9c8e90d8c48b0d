"""Forking a run from a turn: a new run whose history is the first N turns of another, copied
(no tool of those turns runs again: their results are in the copy, so no call of theirs is ever
dispatched), which then goes on, with a new user message if one is given.

The fork records its origin (`forked_from`) and the run lists its forks (`forks`): `GET
/runs/{id}` shows both ways. Only the run's owner may fork it, and the fork is the owner's.
Turns and calls count the copied history (the agent's `max_iterations` and `max_tool_calls`
see the whole conversation); tokens and cost count what the fork itself spends.
"""

import hashlib
import json
from typing import NamedTuple

from toolpipe.shared.history import HistoryStore, retention
from toolpipe.shared.history.errors import RunNotFoundError
from toolpipe.shared.messages import (
    AssistantMessage,
    ForkOrigin,
    ForkRunRequest,
    HistoryItem,
    RunRecord,
    RunStatus,
    ToolResult,
    UserMessage,
)
from toolpipe.shared.runs.calls import result_slot
from toolpipe.shared.runs.errors import IdempotencyConflictError, RunExpiredError, RunNotForkableError
from toolpipe.shared.runs.events import NO_EVENTS, EventPublisher
from toolpipe.shared.runs.ports import ExecutionStarter
from toolpipe.shared.runs.quota import RunQuota
from toolpipe.shared.runs.starter import create_counted, keyed_run_id, new_run_id
from toolpipe.shared.runs.time_limit import deadline_after
from toolpipe.shared.telemetry import new_trace


class Forked(NamedTuple):
    record: RunRecord
    replayed: bool  # True: an earlier fork with the same key made this run; nothing new began


def copied_turns(history: list[HistoryItem], run_id: str, turn: int) -> list[HistoryItem]:
    """The items of the first `turn` turns, checked complete: every call of their replies has
    its result (else a fork would dispatch a call the run may still be running)."""
    kept = [item for item in history if item.turn <= turn]
    answered = {item.seq for item in kept if isinstance(item, ToolResult)}
    for reply in (item for item in kept if isinstance(item, AssistantMessage)):
        slots = {result_slot(reply, i) for i in range(len(reply.tool_calls))}
        if slots - answered:
            raise RunNotForkableError(run_id, f"turn {reply.turn} has calls without results yet")
    return kept


class RunForker:
    def __init__(
        self,
        store: HistoryStore,
        starter: ExecutionStarter,
        *,
        events: EventPublisher = NO_EVENTS,
        quota: RunQuota | None = None,
    ) -> None:
        """`quota`: the per-caller quotas a fork counts against, as a start does (the API's)."""
        self._store = store
        self._starter = starter
        self._events = events
        self._quota = quota

    def fork(
        self, run_id: str, caller: str, request: ForkRunRequest, *, idempotency_key: str | None = None
    ) -> Forked:
        """Fork `run_id` for its owner `caller`.

        Raises:
            RunNotFoundError: unknown, or not the caller's (the admin principal included).
            RunNotForkableError: the turn is past the run's, or not complete.
            RunExpiredError: the run is past its `retain_until` (its items may be going).
            QuotaExceededError: the caller is over a quota (nothing written), as for a start.
            IdempotencyConflictError: the key forked a run with another request already.
        """
        parent = self._store.get_run(run_id)
        if parent.caller != caller:
            raise RunNotFoundError(run_id)
        asked = hashlib.sha256(
            json.dumps([run_id, request.model_dump()], sort_keys=True).encode()
        ).hexdigest()
        fork_id = (
            new_run_id() if idempotency_key is None else keyed_run_id(caller, "fork\n" + idempotency_key)
        )
        if retention.expired(parent.retain_until):
            return self._made_before_expiry(parent, fork_id, asked, idempotency_key)
        if request.turn > parent.turn:
            raise RunNotForkableError(run_id, f"its last turn is {parent.turn}, not {request.turn}")
        items = copied_turns(self._store.load_history(run_id), run_id, request.turn)
        record = RunRecord(
            run_id=fork_id,
            agent=parent.agent,
            status=RunStatus.RUNNING,
            timezone=parent.timezone,
            caller=caller,
            tools=parent.tools,
            requested_tools=parent.requested_tools,
            mcp_servers=parent.mcp_servers,
            metadata=parent.metadata,
            # The turns copied are counted as the fork's (its first model step counts none again).
            turn=request.turn,
            execution_start_turn=request.turn,
            max_duration=parent.max_duration,
            deadline=deadline_after(parent.max_duration),
            max_duration_waits=parent.max_duration_waits,
            limits=parent.limits,
            request_hash=asked,
            forked_from=ForkOrigin(run_id=run_id, turn=request.turn),
            trace=new_trace(None),
        )
        first, rest = items[0], items[1:]
        assert isinstance(first, UserMessage), "a run's history begins with its user message"
        replayed = not create_counted(self._store, self._starter, self._quota, record, first)
        if replayed:
            record = self._store.get_run(fork_id)
            if record.request_hash != asked:
                raise IdempotencyConflictError(idempotency_key or "", fork_id, "forked")
        else:
            self._events.run_started(record)
        # Again on a replay: a first fork that died half-way is finished (each write is once).
        self._copy(fork_id, rest)
        if request.input is not None:
            last = items[-1]
            self._store.append(
                fork_id, UserMessage(seq=last.seq + 1, turn=request.turn, content=request.input)
            )
        self._store.add_fork(run_id, fork_id)
        if record.status is RunStatus.RUNNING:
            self._starter.start(fork_id, record.execution, record.deadline, record.max_duration_waits)
        return Forked(record, replayed)

    def _made_before_expiry(
        self, parent: RunRecord, fork_id: str, asked: str, idempotency_key: str | None
    ) -> Forked:
        """The run's items may be going: only the fork this key made before, copied whole (the
        run lists it), is answered, as it is; any other fork is refused, a half-made one too."""
        if idempotency_key is None or fork_id not in parent.forks:
            assert parent.retain_until is not None  # expired
            raise RunExpiredError(parent.run_id, parent.retain_until, "forked")
        made = self._store.get_run(fork_id)
        if made.request_hash != asked:
            raise IdempotencyConflictError(idempotency_key, fork_id, "forked")
        if made.status is RunStatus.RUNNING:  # the first may have died before starting it
            self._starter.start(fork_id, made.execution, made.deadline, made.max_duration_waits)
        return Forked(made, replayed=True)

    def _copy(self, fork_id: str, items: list[HistoryItem]) -> None:
        for item in items:
            if isinstance(item, ToolResult) and item.full_result_ref:
                # The whole result, under the fork's own key: the run may be deleted before it.
                whole = self._store.get_result(item.full_result_ref)
                item = item.model_copy(
                    update={"full_result_ref": self._store.put_result(fork_id, item.seq, whole)}
                )
            self._store.append(fork_id, item)
