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
from toolpipe.shared.agents import AGENTS, Agent, agent_tool
from toolpipe.shared.agents.hooks import Hooks
from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.messages import ToolCallMessage, ToolResult
from toolpipe.shared.runs import ToolCallExecutor
from toolpipe.shared.runs.tool_executor import RESERVE_SECONDS
from toolpipe.shared.tools import Execution, ToolContext, tool
from toolpipe.shared.tools.errors import ToolExecutionError

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

        assert time.monotonic() - started < 15  # the tool or hook would take 30 s
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
        assert time.monotonic() - started < 15  # the tool or hook would take 30 s
        assert result.status == "error" and result.content == said


class _MyKind(ToolExecutionError):
    kind = "MyKind"  # type: ignore[assignment]


@tool(result_converter=lambda value: value)  # type: ignore[arg-type, return-value]
def number(ctx: ToolContext) -> int:
    """Answer with a number its converter leaves a number."""
    EFFECTS.add(ctx.idempotency_key)
    return 42


@tool
def own_kind(ctx: ToolContext) -> str:
    """Fail with an error kind of its own."""
    EFFECTS.add(ctx.idempotency_key)
    raise _MyKind("custom")


class _HangingMessage(Exception):
    def __str__(self) -> str:
        time.sleep(30)
        return "late"


@tool
def hangs_saying_why(ctx: ToolContext) -> str:
    """Fail with an error whose message never comes."""
    EFFECTS.add(ctx.idempotency_key)
    raise _HangingMessage()


class _ContentToDict(Hooks):
    def after_tool(self, event: Any) -> None:
        event.execution = Execution({"redacted": True}, "ok", 0)  # type: ignore[arg-type]


class _Redacts(Hooks):
    """A user's redaction hook: keeps the text, drops the error kind (a timeout's too)."""

    def after_tool(self, event: Any) -> None:
        done = event.execution
        event.execution = Execution(done.content.replace("Tool", "The tool"), done.status, done.duration_ms)


@tool(timeout_seconds=0.3)
def pays_late(ctx: ToolContext) -> str:
    """Write the state, then overrun."""
    EFFECTS.add(ctx.idempotency_key)
    ctx.state["paid"] = "half"
    time.sleep(1)
    ctx.state["paid"] = "all"
    return "paid"


@pytest.mark.parametrize(
    ("tools", "hooks", "name", "said"),
    [
        (
            [number],
            [],
            "number",
            "Error: Tool 'number' failed: its result is not text with a known status (int).",
        ),
        ([own_kind], [], "own_kind", "Error: custom"),
        (
            [hangs_saying_why],
            [],
            "hangs_saying_why",
            "Error: Tool 'hangs_saying_why' timed out after 1.5 s (the time its worker had left). It may still "
            "take effect: check before calling it again.",
        ),
        (
            [RELIABLE_AGENT.tools[0]],
            [_ContentToDict()],
            "charge",
            "Error: Tool 'charge' failed: its result is not text with a known status (dict).",
        ),
    ],
)
def test_a_call_whose_tool_ran_ends_with_one_clear_result_at_once(
    monkeypatch: pytest.MonkeyPatch, tools: list[Any], hooks: list[Hooks], name: str, said: str
) -> None:
    monkeypatch.setitem(AGENTS, AGENT, Agent(name=AGENT, instructions="x", tools=tools, hooks=hooks))
    args = {"label": "x"} if name == "charge" else {}
    with moto_store() as store:
        started = time.monotonic()
        result = _run_one(store, "ran-1", name, args, time_left=lambda: RESERVE_SECONDS + 1.5)
        assert time.monotonic() - started < 15  # the tool or hook would take 30 s
        assert result.status == "error" and result.content == said
        assert result.error_type is not ErrorKind.IN_DOUBT
        assert EFFECTS.counts["ran-1:3"] == 1


def test_the_state_of_a_timed_out_call_is_never_kept_whatever_a_hook_makes_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(
        AGENTS, AGENT, Agent(name=AGENT, instructions="x", tools=[pays_late], hooks=[_Redacts()])
    )
    with moto_store() as store:
        result = _run_one(store, "late-1", "pays_late", {}, time_left=lambda: RESERVE_SECONDS + 5)
        assert result.content.startswith("Error: The tool 'pays_late' timed out after 0.3 s.")
        time.sleep(1)
        assert store.load_state("late-1") == {}


class _HangsBefore(Hooks):
    def before_tool(self, event: Any) -> None:
        time.sleep(30)


def test_an_agent_tools_before_hook_that_hangs_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    child = Agent(name="child", instructions="x", tools=[])
    parent = Agent(name=AGENT, instructions="x", tools=[agent_tool("child")], hooks=[_HangsBefore()])
    monkeypatch.setitem(AGENTS, "child", child)
    monkeypatch.setitem(AGENTS, AGENT, parent)
    with moto_store() as store:
        started = time.monotonic()
        result = _run_one(store, "child-1", "child", {"task": "t"}, time_left=lambda: RESERVE_SECONDS + 1.5)
        assert time.monotonic() - started < 15  # the tool or hook would take 30 s
        assert result.content == "Error: not run: the before_tool hooks of 'child' did not finish in 1.5 s."
