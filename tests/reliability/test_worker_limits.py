"""The worker's side of a misbehaving tool (issue 18): a failed upload of a long result is tried
again, and a result whose whole cannot be stored still ends its call; a tool with no timeout
gets the invocation's time left; a hook that exits or hangs is the call's error. Each call ends
with one result and an answered task, its side effect done once, never "in doubt"."""

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.reliability.harness import (
    AGENT,
    EFFECTS,
    RELIABLE_AGENT,
    CrashingStore,
    NoStarter,
    RecordingReporter,
    moto_store,
    seed_run,
)
from toolpipe.shared.agents import AGENTS, Agent
from toolpipe.shared.agents.hooks import Hooks
from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.messages import ToolCallMessage, ToolResult
from toolpipe.shared.runs import ToolCallExecutor
from toolpipe.shared.runs.tool_executor import RESERVE_SECONDS
from toolpipe.shared.tools import ToolContext, tool

LONG_KB = 5


@pytest.fixture(autouse=True)
def reliable_agent(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(AGENTS, AGENT, RELIABLE_AGENT)
    EFFECTS.clear()
    yield
    EFFECTS.clear()


def _s3_down() -> ClientError:
    return ClientError(
        {"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."}}, "PutObject"
    )


class _FailingUploads:
    """`put_result` fails `count` times (S3 throttling), then works."""

    def __init__(self, inner: Any, count: int) -> None:
        self._inner, self.count, self.tries = inner, count, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_result(self, run_id: str, seq: int, content: str) -> str:
        self.tries += 1
        if self.count > 0:
            self.count -= 1
            raise _s3_down()
        return str(self._inner.put_result(run_id, seq, content))


def _run_one(store: Any, run_id: str, tool_name: str, args: dict[str, Any], **execute: Any) -> Any:
    [seq] = seed_run(store, run_id, [(tool_name, json.dumps(args))])
    message = ToolCallMessage(run_id=run_id, seq=seq, message_seq=2, task_token=f"tok-{run_id}")
    reporter = RecordingReporter()
    executor = ToolCallExecutor(store, reporter, NoStarter(), 60, sleep=lambda _: None)
    executor.execute(message, 150, **execute)
    result = store.get_item(run_id, seq)
    assert isinstance(result, ToolResult)
    assert reporter.answers[message.task_token] == [{"seq": seq, "status": result.status}]
    return result


def test_a_failed_upload_of_a_long_result_is_tried_again() -> None:
    with moto_store(inline_limit=100_000) as store:
        flaky = _FailingUploads(store, count=2)
        result = _run_one(flaky, "upload-1", "charge_long", {"kilobytes": LONG_KB})

        assert flaky.tries == 3
        assert result.status == "ok" and result.error_type is None
        assert store.get_result(str(result.full_result_ref)) == "y" * LONG_KB * 1000
        assert EFFECTS.counts["upload-1:3"] == 1


def test_a_long_result_that_cannot_be_stored_still_ends_its_call() -> None:
    with moto_store(inline_limit=100_000) as store:
        down = _FailingUploads(store, count=100)
        result = _run_one(down, "upload-2", "charge_long", {"kilobytes": LONG_KB})

        assert result.status == "ok" and result.error_type is not ErrorKind.IN_DOUBT
        assert result.full_result_ref is None and result.full_result_chars == LONG_KB * 1000
        assert result.content.startswith("y" * 2_000)
        assert result.content.endswith(
            "[… result truncated: 5000 characters in all, the first 2000 shown. The whole result could "
            "not be stored (ClientError: An error occurred (SlowDown) when calling the PutObject "
            "operation: Please reduce your request rate.).]"
        )
        assert EFFECTS.counts["upload-2:3"] == 1


@tool
def hangs(ctx: ToolContext) -> str:
    """Never answer (no timeout of its own)."""
    EFFECTS.add(ctx.idempotency_key)
    time.sleep(30)
    return "late"


def test_a_tool_with_no_timeout_gets_the_invocations_time_left(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        AGENTS, AGENT, Agent(name=AGENT, instructions="x", tools=[hangs], tool_timeout_seconds=None)
    )
    with moto_store() as store:
        started = time.monotonic()
        # 11.5 s left in the invocation: the tool gets 1.5 s, the rest stores and answers.
        result = _run_one(store, "hang-1", "hangs", {}, time_left=lambda: RESERVE_SECONDS + 1.5)

        assert time.monotonic() - started < 6
        assert result.error_type is ErrorKind.TOOL_TIMEOUT
        assert result.content == (
            "Error: Tool 'hangs' timed out after 1.5 s (the time its worker had left). It may still take "
            "effect: check before calling it again."
        )
        assert EFFECTS.counts["hang-1:3"] == 1


class _ExitsBefore(Hooks):
    def before_tool(self, event: Any) -> None:
        raise SystemExit(3)


class _ExitsAfter(Hooks):
    def after_tool(self, event: Any) -> None:
        raise SystemExit(3)


class _HangsAfter(Hooks):
    def after_tool(self, event: Any) -> None:
        time.sleep(30)


@pytest.mark.parametrize(
    ("hooks", "said"),
    [
        (_ExitsBefore(), "Error: Tool 'charge' failed: SystemExit: 3"),
        (_ExitsAfter(), "Error: Tool 'charge' failed: SystemExit: 3"),
        (
            _HangsAfter(),
            "Error: Tool 'charge' timed out after 1.5 s (the time its worker had left). It may still take "
            "effect: check before calling it again.",
        ),
    ],
)
def test_a_hook_that_exits_or_hangs_is_the_calls_error(
    monkeypatch: pytest.MonkeyPatch, hooks: Hooks, said: str
) -> None:
    agent = Agent(name=AGENT, instructions="x", tools=RELIABLE_AGENT.tools, hooks=[hooks])
    monkeypatch.setitem(AGENTS, AGENT, agent)
    with moto_store() as store:
        started = time.monotonic()
        result = _run_one(
            CrashingStore(store), "hook-1", "charge", {"label": "x"}, time_left=lambda: RESERVE_SECONDS + 1.5
        )
        assert time.monotonic() - started < 8
        assert result.status == "error" and result.content == said
