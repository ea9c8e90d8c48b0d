"""Scenario 2: the worker dies at every step — before the tool, after its side effect, around
each write (the S3 put of a long result, the `complete_call` transaction), before and after the
task answer — then SQS delivers the message again: at once (the claim's lease still runs),
then after the lease. Non-idempotent tools never run twice (an in-doubt result instead);
idempotent ones may run again; every call ends with exactly one result and an answered task.
Run against both stores: DynamoHistoryStore on moto and MemoryHistoryStore."""

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.reliability.figures import record
from tests.reliability.harness import (
    AGENT,
    EFFECTS,
    RELIABLE_AGENT,
    Crash,
    CrashingStore,
    FakeClock,
    NoStarter,
    RecordingReporter,
    moto_tables,
    seed_run,
)
from toolpipe.shared.agents import AGENTS
from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.history import MemoryHistoryStore
from toolpipe.shared.history import ledger as dynamo_store_module
from toolpipe.shared.messages import ToolCallMessage, ToolResult
from toolpipe.shared.runs import ToolCallExecutor
from toolpipe.shared.runs.errors import CallInProgressError

LEASE_SECONDS = 150
LONG_KB = 5  # past the agent's max_result_chars: the whole result goes to S3 first


def _throttled() -> ClientError:
    return ClientError(
        {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "TransactWriteItems"
    )


@dataclass(frozen=True)
class Point:
    """Where the first delivery dies: a store method (before/after its n-th call), the
    reporter, or the tool itself right after its side effect."""

    name: str
    method: str = ""
    when: str = "before"
    nth: int = 1
    reporter: str | None = None
    in_tool: bool = False
    long_only: bool = False
    errors: int = 0  # instead of dying: this many failed writes in a row (ordinary exceptions)
    claim_held: bool = True  # the first delivery leaves a live claim behind (else none, or released)


POINTS = [
    Point("at the first heartbeat", reporter="heartbeat", claim_held=False),
    Point("before reading the result slot", "get_item", claim_held=False),
    Point("before the claim", "claim_call", claim_held=False),
    Point("right after the claim", "claim_call", "after"),
    # Nothing ran yet: the executor gives the claim back, so the redelivery runs at once.
    Point("while loading the run", "get_run", claim_held=False),
    Point("before the tool (loading state)", "load_state"),
    Point("after the tool's side effect", in_tool=True),
    Point("before the S3 put of the long result", "put_result", long_only=True),
    Point("after the S3 put of the long result", "put_result", "after", long_only=True),
    Point("before the complete_call transaction", "complete_call"),
    Point("after the complete_call transaction", "complete_call", "after"),
    Point("before the task answer", reporter="succeed"),
    Point("after the task answer", reporter="after_succeed"),
    Point("one throttled complete_call (retried in-process)", "complete_call", errors=1),
    Point("complete_call failing every retry", "complete_call", errors=3),
]
TOOLS = {"charge": False, "upsert": True, "charge_long": False, "upsert_long": True}  # name -> idempotent


@pytest.fixture(autouse=True)
def reliable_agent(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(AGENTS, AGENT, RELIABLE_AGENT)
    EFFECTS.clear()
    yield
    EFFECTS.clear()


class _FailingWrites:
    """`complete_call` fails `count` times with a throttling error, then works."""

    def __init__(self, inner: Any, count: int) -> None:
        self._inner, self.count = inner, count

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def complete_call(self, *args: Any, **kwargs: Any) -> bool:
        if self.count > 0:
            self.count -= 1
            raise _throttled()
        return bool(self._inner.complete_call(*args, **kwargs))


@dataclass
class Outcome:
    lost: int = 0
    duplicated: int = 0
    in_doubt: int = 0
    reran: int = 0
    survived: int = 0
    tried: int = 0
    failures: list[str] | None = None


def _scenario(store: Any, clock: FakeClock, label: str, outcome: Outcome) -> None:
    assert outcome.failures is not None
    for tool_name, idempotent in TOOLS.items():
        long = tool_name.endswith("_long")
        for p, point in enumerate(POINTS):
            if point.long_only and not long:
                continue
            outcome.tried += 1
            run_id = f"{label}-{tool_name}-{p}"
            args = {"kilobytes": LONG_KB} if long else {"label": "x"}
            [seq] = seed_run(store, run_id, [(tool_name, json.dumps(args))])
            message = ToolCallMessage(run_id=run_id, seq=seq, message_seq=2, task_token=f"tok-{run_id}")
            reporter = RecordingReporter()
            sleeps: list[float] = []
            crashing = CrashingStore(store)
            first_store: Any = crashing
            if point.errors:
                first_store = _FailingWrites(store, point.errors)
            elif point.method:
                crashing.arm(point.method, point.when, point.nth)
            reporter.crash_at = point.reporter
            EFFECTS.crash_after_effect = point.in_tool
            first = ToolCallExecutor(first_store, reporter, NoStarter(), 60, sleep=sleeps.append)
            try:
                first.execute(message, LEASE_SECONDS)
                first_ended = "done"
            except Crash:
                first_ended = "died"
            except Exception as e:  # a failed invocation: SQS delivers the message again
                first_ended = type(e).__name__
            EFFECTS.crash_after_effect = False
            reporter.crash_at = None

            again = ToolCallExecutor(store, reporter, NoStarter(), 60, sleep=sleeps.append)
            # At once, while the first delivery's claim holds: nothing may run.
            effects_before = EFFECTS.counts[f"{run_id}:{seq}"]
            with contextlib.suppress(CallInProgressError):
                again.execute(message, LEASE_SECONDS)
            if point.claim_held and EFFECTS.counts[f"{run_id}:{seq}"] != effects_before:
                outcome.failures.append(f"{run_id}: ran during a live claim")
            # After the lease: the redelivery takes the call over (or answers from its result).
            clock.offset += LEASE_SECONDS + 60
            again.execute(message, LEASE_SECONDS)

            result = store.get_item(run_id, seq)
            effects = EFFECTS.counts[f"{run_id}:{seq}"]
            answers = reporter.answers.get(message.task_token, [])
            if not isinstance(result, ToolResult) or not answers:
                outcome.lost += 1
                outcome.failures.append(
                    f"{run_id} ({point.name}, first {first_ended}): no result or no answer"
                )
                continue
            if any(a != {"seq": seq, "status": result.status} for a in answers):
                outcome.failures.append(f"{run_id}: answer differs from the stored result")
            if result.error_type is ErrorKind.IN_DOUBT:
                outcome.in_doubt += 1
                if idempotent:
                    outcome.failures.append(f"{run_id}: idempotent tool left in doubt")
            elif result.status != "ok":
                outcome.failures.append(
                    f"{run_id} ({point.name}): unexpected error result {result.content!r}"
                )
            if long and result.error_type is None:
                whole = store.get_result(str(result.full_result_ref))
                if len(whole) != LONG_KB * 1000:
                    outcome.lost += 1
                    outcome.failures.append(f"{run_id}: long result incomplete in S3")
                    continue
            if effects > 1:
                if idempotent:
                    outcome.reran += 1
                else:
                    outcome.duplicated += 1
                    outcome.failures.append(
                        f"{run_id} ({point.name}): non-idempotent tool ran {effects} times"
                    )
            if effects == 0 and result.error_type is not ErrorKind.IN_DOUBT:
                outcome.failures.append(f"{run_id} ({point.name}): ok result but the tool never ran")
            outcome.survived += 1


def test_a_crash_at_every_step_then_redelivery(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(dynamo_store_module, "time", clock)
    outcome = Outcome(failures=[])
    with moto_tables(inline_limit=100_000) as tables:
        _scenario(tables.store("crashes"), clock, "dynamo", outcome)
    _scenario(MemoryHistoryStore(clock=clock.time), clock, "memory", outcome)

    assert outcome.failures is not None
    met = outcome.lost == 0 and outcome.duplicated == 0 and not outcome.failures
    record(
        "2 worker crash at every step, then redelivery",
        tried=outcome.tried,
        survived=outcome.survived,
        lost=outcome.lost,
        duplicated=outcome.duplicated,
        in_doubt=outcome.in_doubt,
        goal="0 lost, 0 duplicated (non-idempotent), in-doubt allowed",
        met=met,
        note=(
            f"{len(POINTS)} crash points x 4 tools (idempotent or not, short or long result), on "
            f"DynamoHistoryStore (moto) and MemoryHistoryStore; each crash followed by a redelivery during "
            f"the claim's lease (must not run) and one after it. Idempotent tools ran again "
            f"{outcome.reran} times (allowed)."
        ),
    )
    assert not outcome.failures, "\n".join(outcome.failures)
    assert met
