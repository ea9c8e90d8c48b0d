"""Every storage port in memory, with the same conditional semantics as the DynamoDB store:
what unit tests of `shared/runs` run against."""

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from toolpipe.shared.costs.operations import Operations
from toolpipe.shared.dynamo import META_SK, run_pk
from toolpipe.shared.history.errors import QuotaExceededError, RunNotFoundError
from toolpipe.shared.history.ports import (
    ERROR_MAX_CHARS,
    OUTPUT_INLINE_CHARS,
    Admission,
    Appended,
    CallRead,
    Claim,
    ClaimState,
    Cursor,
    reply_usage,
)
from toolpipe.shared.history.retention import DEFAULT_RETENTION_DAYS, retain_until, run_prefix
from toolpipe.shared.history.run_records import bounded, caller_index_keys, check_cursor
from toolpipe.shared.messages import (
    AssistantMessage,
    HandoffRecord,
    HistoryItem,
    RunRecord,
    RunStatus,
    RunSummary,
    ToolResult,
    Usage,
    utc_now,
)


@dataclass
class _Claim:
    state: str
    owner: str
    lease_until: float
    attempt: int


class MemoryHistoryStore:
    def __init__(self, clock: Any = time.time) -> None:
        self._lock = threading.RLock()
        self._clock = clock
        self.runs: dict[str, RunRecord] = {}
        self.items: dict[str, dict[int, HistoryItem]] = {}
        self.claims: dict[tuple[str, int], _Claim] = {}
        self.trees: dict[str, Usage] = {}
        self.objects: dict[str, str] = {}
        self.state: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, str] = {}
        # The runs' cost counters (shared/costs), and the executions counted into them.
        self.costs: dict[str, Operations] = {}
        self.counted_executions: set[tuple[str, str]] = set()
        self.retention_days = DEFAULT_RETENTION_DAYS
        # The quotas (shared/runs/quota.py): starts by (caller, minute), running slots by caller,
        # and the caller each run holding a slot holds it for.
        self.started: dict[tuple[str, int], int] = {}
        self.slots: dict[str, set[str]] = {}
        self.holding: dict[str, str] = {}
        # Make the next `failing_completes` calls of `complete_call` raise (a failed write).
        self.failing_completes = 0

    # --- run records ----------------------------------------------------------------------

    def create_run(self, record: RunRecord, first: HistoryItem, admission: Admission | None = None) -> bool:
        with self._lock:
            if record.run_id in self.runs:
                return False
            if admission is not None:
                self._admit(record.run_id, admission)
            self.runs[record.run_id] = record
            self.items[record.run_id] = {first.seq: first}
            self.costs[record.run_id] = Operations()
            return True

    def _admit(self, run_id: str, admission: Admission) -> None:
        minute = (admission.caller, admission.window)
        slots = self.slots.setdefault(admission.caller, set())
        per_minute, running = admission.starts_per_minute, admission.running
        if per_minute is not None and self.started.get(minute, 0) >= per_minute:
            raise QuotaExceededError(
                "starts_per_minute", per_minute, admission.retry_after["starts_per_minute"]
            )
        if running is not None and len(slots) >= running:
            raise QuotaExceededError("running", running, admission.retry_after["running"])
        if per_minute is not None:
            self.started[minute] = self.started.get(minute, 0) + 1
        if running is not None:
            slots.add(run_id)
            self.holding[run_id] = admission.caller

    def running_slots(self, caller: str) -> list[str]:
        with self._lock:
            return sorted(self.slots.get(caller, set()))

    def release_slots(self, caller: str, run_ids: list[str]) -> None:
        with self._lock:
            running = {r for r in run_ids if r in self.runs and self.runs[r].status is RunStatus.RUNNING}
            self.slots.get(caller, set()).difference_update(set(run_ids) - running)

    def get_runs(self, run_ids: list[str]) -> dict[str, RunRecord]:
        return {run_id: self.get_run(run_id) for run_id in run_ids if run_id in self.runs}

    def get_run(self, run_id: str) -> RunRecord:
        try:
            run = self.runs[run_id]
        except KeyError:
            raise RunNotFoundError(run_id) from None
        if run.root_run_id in (None, run_id):
            return run.model_copy(update={"tree_usage": self.trees.get(run_id, Usage())})
        return run

    def record_model_call(
        self, run_id: str, turn: int, used: Usage, root_run_id: str | None = None
    ) -> Usage | None:
        with self._lock:
            run = self.runs.get(run_id)
            if run is None or run.turn >= turn:
                return None  # this turn is counted already (a retried step), or the run is gone
            self.runs[run_id] = run.model_copy(update={"turn": turn, "usage": run.usage + used})
            root = root_run_id or run_id
            self.trees[root] = self.trees.get(root, Usage()) + used
            return self.trees[root]

    def tree_usage(self, root_run_id: str) -> Usage:
        return self.trees.get(root_run_id, Usage())

    def finish_run(
        self, run_id: str, status: RunStatus, output: str | None = None, error: str | None = None
    ) -> bool:
        with self._lock:
            run = self.get_run(run_id)
            if run.status is not RunStatus.RUNNING:
                return False
            update: dict[str, Any] = {
                "status": status,
                "output": output,
                "error": bounded(error, ERROR_MAX_CHARS),
                "retain_until": retain_until(self.retention_days, self._clock()),
            }
            if output is not None and len(output) > OUTPUT_INLINE_CHARS:
                key = f"runs/{run_id}/output.txt"
                self.objects[key] = output
                update |= {
                    "output": output[:OUTPUT_INLINE_CHARS],
                    "output_ref": key,
                    "output_chars": len(output),
                }
            self.runs[run_id] = run.model_copy(update=update)
            caller = self.holding.pop(run_id, None)
            if caller is not None:
                self.release_slots(caller, [run_id])
            return True

    def set_execution(self, run_id: str, execution: int, start_turn: int) -> bool:
        with self._lock:
            run = self.runs.get(run_id)
            if run is None or run.status is not RunStatus.RUNNING or run.execution != execution - 1:
                return False
            self.runs[run_id] = run.model_copy(
                update={"execution": execution, "execution_start_turn": start_turn}
            )
            return True

    def resume_run(self, run: RunRecord, resumed: RunRecord, admission: Admission | None = None) -> bool:
        with self._lock:
            now = self.get_run(run.run_id)
            if now.status is not run.status or now.execution != run.execution:
                return False
            if admission is not None:
                self._admit(run.run_id, replace(admission, starts_per_minute=None))
            self.runs[run.run_id] = resumed.model_copy(update={"error": None, "retain_until": None})
            return True

    def add_fork(self, run_id: str, fork_id: str) -> None:
        with self._lock:
            run = self.get_run(run_id)
            if fork_id not in run.forks:
                self.runs[run_id] = run.model_copy(update={"forks": [*run.forks, fork_id]})

    def keep_resumed(self, run_id: str, execution: int) -> None:
        pass  # nothing here expires: the record's `retain_until` is all there is

    def expire_ended(self, run_id: str) -> None:
        pass  # nothing here expires: the record's `retain_until` is all there is

    def delete_run(self, run_id: str) -> None:
        with self._lock:
            self.items.pop(run_id, None)
            self.state.pop(run_id, None)
            self.tokens.pop(run_id, None)
            self.trees.pop(run_id, None)
            self.costs.pop(run_id, None)
            self.counted_executions = {k for k in self.counted_executions if k[0] != run_id}
            for key in [k for k in self.claims if k[0] == run_id]:
                del self.claims[key]
            for name in [k for k in self.objects if k.startswith(run_prefix(run_id))]:
                del self.objects[name]
            self.runs.pop(run_id, None)

    def record_handoffs(self, run_id: str, handoffs: list[HandoffRecord], active: str, known: int) -> bool:
        with self._lock:
            run = self.get_run(run_id)
            if run.status is not RunStatus.RUNNING or len(run.handoffs) != known:
                return False
            self.runs[run_id] = run.model_copy(
                update={"active_agent": active, "handoffs": list(handoffs), "updated_at": utc_now()}
            )
            return True

    def list_runs(
        self,
        caller: str | None,
        *,
        status: RunStatus | None = None,
        agent: str | None = None,
        limit: int = 100,
        start: Cursor | None = None,
    ) -> tuple[list[RunSummary], Cursor | None]:
        """As the DynamoDB store pages its index: cursors are the same keys, checked the same way."""
        check_cursor(start, caller)

        def keys(run: RunRecord) -> Cursor:
            return {"pk": run_pk(run.run_id), "sk": META_SK, **(caller_index_keys(run) if caller else {})}

        with self._lock:
            if caller is None:
                runs = sorted(self.runs.values(), key=lambda r: r.run_id)
            else:
                runs = sorted(
                    (r for r in self.runs.values() if r.caller == caller),
                    key=lambda r: caller_index_keys(r)["gsi1sk"],
                    reverse=True,
                )
        if start is not None:
            position = next((i for i, r in enumerate(runs) if keys(r) == start), None)
            runs = runs[position + 1 :] if position is not None else []
        chosen = [r for r in runs if (status is None or r.status is status) and (agent in (None, r.agent))]
        page = chosen[:limit]
        more = len(chosen) > limit
        return [RunSummary.of(r) for r in page], keys(page[-1]) if more else None

    # --- history --------------------------------------------------------------------------

    def load_history(self, run_id: str) -> list[HistoryItem]:
        with self._lock:
            return [item for _, item in sorted(self.items.get(run_id, {}).items())]

    def iter_history(self, run_id: str, after: int = 0, page_size: int | None = 100) -> Iterator[HistoryItem]:
        return iter([item for item in self.load_history(run_id) if item.seq > after])

    def stored_message_key(self, run_id: str, seq: int) -> str | None:
        return None  # nothing is too large to keep in memory

    def get_item(self, run_id: str, seq: int) -> HistoryItem | None:
        return self.items.get(run_id, {}).get(seq)

    def load_call(self, run_id: str, reply_seq: int, seq: int) -> CallRead:
        with self._lock:
            return CallRead(
                self.get_run(run_id), self.get_item(run_id, reply_seq), self.get_item(run_id, seq)
            )

    def append_reply(self, run_id: str, reply: AssistantMessage, root_run_id: str | None = None) -> Appended:
        if not self.append(run_id, reply):
            return Appended(False, None)
        return Appended(True, self.record_model_call(run_id, reply.turn, reply_usage(reply), root_run_id))

    def append(self, run_id: str, item: HistoryItem) -> bool:
        with self._lock:
            slots = self.items.setdefault(run_id, {})
            if item.seq in slots:
                return False
            slots[item.seq] = item
            return True

    # --- the ledger -----------------------------------------------------------------------

    def claim_call(self, run_id: str, seq: int, lease_seconds: int) -> Claim:
        with self._lock:
            now, owner = self._clock(), uuid.uuid4().hex
            claim = self.claims.get((run_id, seq))
            if claim is None:
                self.claims[(run_id, seq)] = _Claim("CLAIMED", owner, now + lease_seconds, 1)
                return Claim(ClaimState.NEW, owner, 1)
            if claim.state == "DONE":
                return Claim(ClaimState.DONE)
            if claim.lease_until >= now:
                return Claim(ClaimState.BUSY)
            claim.owner, claim.lease_until, claim.attempt = owner, now + lease_seconds, claim.attempt + 1
            return Claim(ClaimState.TAKEN_OVER, owner, claim.attempt)

    def complete_call(
        self,
        run_id: str,
        result: ToolResult,
        owner: str,
        state_changes: tuple[dict[str, Any], list[str]] = ({}, []),
    ) -> bool:
        with self._lock:
            if self.failing_completes > 0:
                self.failing_completes -= 1
                raise ConnectionError("the store did not answer")
            claim = self.claims.get((run_id, result.seq))
            if claim is None or claim.owner != owner or result.seq in self.items.get(run_id, {}):
                return False
            self.append(run_id, result)
            claim.state = "DONE"
            changed, removed = state_changes
            state = self.state.setdefault(run_id, {})
            state.update(changed)
            for key in removed:
                state.pop(key, None)
            return True

    def release_call(self, run_id: str, seq: int, owner: str) -> None:
        with self._lock:
            claim = self.claims.get((run_id, seq))
            if claim is not None and claim.owner == owner and claim.state == "CLAIMED":
                del self.claims[(run_id, seq)]

    # --- contents, state, tokens ------------------------------------------------------------

    def put_result(self, run_id: str, seq: int, content: str) -> str:
        key = f"runs/{run_id}/results/{seq:06d}.txt"
        self.objects[key] = content
        return key

    def get_result(self, key: str) -> str:
        return self.objects[key]

    def load_state(self, run_id: str) -> dict[str, Any]:
        return dict(self.state.get(run_id, {}))

    def put_parent_token(self, run_id: str, token: str) -> None:
        self.tokens[run_id] = token

    def get_parent_token(self, run_id: str) -> str | None:
        return self.tokens.get(run_id)

    # --- costs ----------------------------------------------------------------------------

    def add_costs(self, run_id: str, ops: Operations) -> bool:
        with self._lock:
            if run_id not in self.costs:
                return False
            self.costs[run_id] = self.costs[run_id] + ops
            return True

    def get_costs(self, run_id: str) -> Operations:
        with self._lock:
            return self.costs.get(run_id, Operations())

    def count_execution(self, run_id: str, execution: str, transitions: int) -> bool:
        with self._lock:
            if run_id not in self.costs or (run_id, execution) in self.counted_executions:
                return False
            self.counted_executions.add((run_id, execution))
            self.costs[run_id] = self.costs[run_id] + Operations(state_transitions=transitions)
            return True
