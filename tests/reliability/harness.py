"""What the reliability scenarios share: a store on moto, fakes of our own ports (a recording
task reporter, a store that dies at a chosen call), and tools that count their side effects
per call, so a duplicate is seen wherever it comes from."""

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
from moto import mock_aws

from toolpipe.infra.local import serial
from toolpipe.infra.local.runtime import HISTORY_TABLE
from toolpipe.shared.agents import Agent
from toolpipe.shared.history import DynamoHistoryStore
from toolpipe.shared.messages import AssistantMessage, RunRecord, RunStatus, ToolCall, UserMessage
from toolpipe.shared.tools import ToolContext, tool

TABLE = "reliability"
BUCKET = "reliability-contents"
AGENT = "reliable"


class Effects:
    """Side effects done by the tools below, per call (`ToolContext.idempotency_key`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        # Set by a scenario: the tool does its effect, then the process dies (see `Crash`).
        self.crash_after_effect = False
        # The effect is done and the process is to die: the worker's next store call does
        # (a `CrashingStore`'s), before anything of the call is stored.
        self.dying = False

    def add(self, key: str) -> None:
        with self._lock:
            self.counts[key] += 1
        if self.crash_after_effect:
            # Not raised from the tool: whatever a tool raises, `SystemExit` included, is its
            # call's error result. The death comes right after, at the worker's next step.
            self.dying = True

    def clear(self) -> None:
        with self._lock:
            self.counts.clear()
        self.crash_after_effect = False
        self.dying = False


EFFECTS = Effects()


class Crash(SystemExit):
    """The process dies here. A SystemExit, which the worker's own code never swallows (only
    what tool code raises becomes the call's error result), as no code runs after a real Lambda
    death."""


@tool
def charge(label: str, ctx: ToolContext) -> str:
    """Do a side effect that must happen once (not idempotent).

    Args:
        label: Any text.
    """
    EFFECTS.add(ctx.idempotency_key)
    return f"charged {label}"


@tool(idempotent=True)
def upsert(label: str, ctx: ToolContext) -> str:
    """Do a side effect that may safely happen again (idempotent).

    Args:
        label: Any text.
    """
    EFFECTS.add(ctx.idempotency_key)
    return f"upserted {label}"


@tool
def charge_long(kilobytes: int, ctx: ToolContext) -> str:
    """Do a side effect once and return a long text.

    Args:
        kilobytes: How many KB of text.
    """
    EFFECTS.add(ctx.idempotency_key)
    return "y" * (kilobytes * 1000)


@tool(idempotent=True)
def upsert_long(kilobytes: int, ctx: ToolContext) -> str:
    """Do an idempotent side effect and return a long text.

    Args:
        kilobytes: How many KB of text.
    """
    EFFECTS.add(ctx.idempotency_key)
    return "z" * (kilobytes * 1000)


RELIABLE_AGENT = Agent(
    name=AGENT,
    instructions="You test toolpipe's guarantees.",
    tools=[charge, upsert, charge_long, upsert_long],
    tool_timeout_seconds=None,  # in-line, no thread per call: the scenarios run thousands
    max_result_chars=2_000,
)


class RecordingReporter:
    """A `TaskReporter` that records every answer. Tokens stay open after an answer (as a
    replayed `send_task_success` is accepted by moto): the ledger, not the reporter, must
    stop duplicates. `crash_before_succeed` makes the next `succeed` die first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.answers: dict[str, list[dict[str, Any]]] = {}
        self.heartbeats: Counter[str] = Counter()
        self.crash_at: str | None = None  # "heartbeat", "succeed", "after_succeed"

    def succeed(self, token: str, output: dict[str, Any]) -> bool:
        if self.crash_at == "succeed":
            self.crash_at = None
            raise Crash("died before answering the task")
        with self._lock:
            self.answers.setdefault(token, []).append(output)
        if self.crash_at == "after_succeed":
            self.crash_at = None
            raise Crash("died right after answering the task")
        return True

    def heartbeat(self, token: str) -> bool:
        if self.crash_at == "heartbeat":
            self.crash_at = None
            raise Crash("died at the first heartbeat")
        with self._lock:
            self.heartbeats[token] += 1
        return True


class NoStarter:
    def start(
        self, run_id: str, execution: int = 1, deadline: str | None = None, waits: str = "count"
    ) -> None:
        raise AssertionError("no child runs in this scenario")


class CrashingStore:
    """Wraps a store; dies (raises `Crash`) before or after the n-th call of one method."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.crash: tuple[str, str, int] | None = None  # (method, "before"|"after", nth call)
        self._calls: Counter[str] = Counter()
        # Raise this (an ordinary exception: a throttled or failed write) at the chosen call instead.
        self.error: Exception | None = None

    def arm(self, method: str, when: str, nth: int = 1, error: Exception | None = None) -> None:
        self.crash, self.error = (method, when, nth), error
        self._calls.clear()

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target):
            return target

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if EFFECTS.dying:
                EFFECTS.dying = False
                raise Crash("died right after the tool's side effect")
            self._calls[name] += 1
            hit = self.crash is not None and self.crash[0] == name and self.crash[2] == self._calls[name]
            when = self.crash[1] if hit and self.crash else ""
            if hit and when == "before":
                self.crash = None
                if self.error is not None:
                    raise self.error
                raise Crash(f"died before {name}")
            result = target(*args, **kwargs)
            if hit and when == "after":
                self.crash = None
                raise Crash(f"died after {name}")
            return result

        return wrapped


class MotoTables:
    """Tables on moto, each with its own DynamoHistoryStore, one bucket for contents."""

    def __init__(self, inline_limit: int) -> None:
        self._dynamodb = boto3.resource("dynamodb", region_name="us-east-1")
        self._s3 = boto3.client("s3", region_name="us-east-1")
        self._s3.create_bucket(Bucket=BUCKET)
        self._inline_limit = inline_limit
        self.names: list[str] = []

    def store(self, name: str = TABLE) -> DynamoHistoryStore:
        # moto copies a whole table for every item of a transaction (to roll back), so one
        # `complete_call` costs time in proportion to the table: scenarios shard their calls.
        table = self._dynamodb.create_table(TableName=name, **HISTORY_TABLE)
        self.names.append(name)
        return DynamoHistoryStore(table, self._s3, BUCKET, self._inline_limit)


@contextmanager
def moto_tables(inline_limit: int = 100_000) -> Iterator[MotoTables]:
    """moto, with every request atomic (as AWS applies them): see infra/local/serial.py."""
    with mock_aws():
        undo = serial.install()
        try:
            yield MotoTables(inline_limit)
        finally:
            undo()


@contextmanager
def moto_store(inline_limit: int = 100_000) -> Iterator[DynamoHistoryStore]:
    """One DynamoHistoryStore on moto."""
    with moto_tables(inline_limit) as tables:
        yield tables.store()


def seed_run(store: Any, run_id: str, calls: list[tuple[str, str]], agent: str = AGENT) -> list[int]:
    """A running run whose model reply (slot 2) made `calls` [(tool, arguments JSON)]: the
    result slots, as the orchestrator would dispatch them."""
    record = RunRecord(run_id=run_id, agent=agent, status=RunStatus.RUNNING)
    assert store.create_run(record, UserMessage(seq=1, turn=0, content="go"))
    reply = AssistantMessage(
        seq=2,
        turn=1,
        tool_calls=[ToolCall(id=f"c{i}", name=name, arguments=args) for i, (name, args) in enumerate(calls)],
    )
    assert store.append(run_id, reply)
    return [3 + i for i in range(len(calls))]


class FakeClock:
    """`time` for the store's leases: a redelivery `after the lease` without waiting for it."""

    def __init__(self) -> None:
        self.offset = 0.0

    def time(self) -> float:
        return time.time() + self.offset
