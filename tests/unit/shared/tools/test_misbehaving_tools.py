"""A tool that overruns, exits or raises something odd ends as its call's error (issue 18)."""

import asyncio
import contextlib
import itertools
import threading
import time
from typing import Any

import pytest

from toolpipe.shared.agents import Agent
from toolpipe.shared.errors import DefinitionError, describe_exception
from toolpipe.shared.tools import ToolContext, tool
from toolpipe.shared.tools.errors import ToolExecutionError, ToolTimeoutError

NO_WAIT: dict[str, Any] = {"retry_backoff_seconds": 0.0}


class Starts:
    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.count += 1


def test_a_timed_out_call_of_a_tool_that_is_not_idempotent_is_never_started_again() -> None:
    starts = Starts()

    @tool(timeout_seconds=0.2, retry_on=(Exception,), max_retries=2, **NO_WAIT)
    def charge() -> str:
        """Charge a card."""
        starts.add()
        time.sleep(0.4)
        return "charged"

    with pytest.raises(ToolTimeoutError) as raised:
        charge.invoke("{}")
    time.sleep(0.5)  # long enough for a retry that had started to show
    assert starts.count == 1
    assert str(raised.value) == (
        "Tool 'charge' timed out after 0.2 s. It may still take effect: check before calling it again."
    )


def test_an_idempotent_tool_is_retried_on_a_timeout_when_its_retry_on_covers_it() -> None:
    starts = Starts()

    @tool(timeout_seconds=0.1, retry_on=(ToolTimeoutError,), max_retries=2, idempotent=True, **NO_WAIT)
    def read() -> str:
        """Read a page."""
        starts.add()
        time.sleep(0.3)
        return "page"

    with pytest.raises(ToolTimeoutError) as raised:
        read.invoke("{}")
    assert starts.count == 3
    assert str(raised.value) == "Tool 'read' timed out after 0.1 s (3 attempts)."


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        (SystemExit(2), "SystemExit: 2"),
        (SystemExit(), "SystemExit"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
        (GeneratorExit("closed"), "GeneratorExit: closed"),
    ],
)
@pytest.mark.parametrize("timeout", [None, 5.0])
def test_an_exit_or_any_base_exception_is_the_calls_error(
    raised: BaseException, said: str, timeout: float | None
) -> None:
    @tool(timeout_seconds=timeout)
    def leaves() -> str:
        """Leave."""
        raise raised

    # In a thread of its own (a worker's), as on Lambda or the local pool.
    outcome: list[BaseException] = []
    worker = threading.Thread(target=lambda: _capture(outcome, lambda: leaves.invoke("{}")))
    worker.start()
    worker.join(10)
    [error] = outcome
    assert isinstance(error, ToolExecutionError) and str(error) == f"Tool 'leaves' failed: {said}"


def test_ctrl_c_while_a_script_runs_a_tool_itself_still_interrupts_it() -> None:
    @tool
    def waits() -> str:
        """Wait."""
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        waits.invoke("{}")


def _capture(into: list[BaseException], fn: Any) -> None:
    try:
        fn()
    except BaseException as e:
        into.append(e)


def test_an_unreadable_message_is_said_so() -> None:
    class Unreadable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    @tool(retry_on=(Unreadable,), max_retries=1, **NO_WAIT)
    def fails() -> str:
        """Fail."""
        raise Unreadable()

    with pytest.raises(ToolExecutionError) as raised:
        fails.invoke("{}")
    assert (
        str(raised.value)
        == "Tool 'fails' failed after 2 attempts: Unreadable: (its message could not be read)"
    )


@pytest.mark.parametrize("timeout", [None, 5.0])
def test_a_tools_own_timeout_error_is_its_failure_not_a_timeout(timeout: float | None) -> None:
    @tool(timeout_seconds=timeout)
    def upstream() -> str:
        """Ask upstream."""
        raise TimeoutError("upstream slow")

    @tool(timeout_seconds=timeout)
    async def upstream_async() -> str:
        """Ask upstream."""
        raise TimeoutError("upstream slow")

    for t in (upstream, upstream_async):
        with pytest.raises(ToolExecutionError) as raised:
            t.invoke("{}")
        assert str(raised.value) == f"Tool '{t.name}' failed: TimeoutError: upstream slow"


def test_a_coroutine_that_ignores_its_cancellation_is_still_answered_at_its_timeout() -> None:
    @tool(timeout_seconds=0.2)
    async def stubborn() -> str:
        """Refuse to stop."""
        for _ in range(300):
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.1)
        return "late"

    started = time.monotonic()
    with pytest.raises(ToolTimeoutError):
        stubborn.invoke("{}")
    assert time.monotonic() - started < 10  # not the 30 s the coroutine would take


def test_an_overrunning_thread_never_holds_the_process_open() -> None:
    release = threading.Event()

    @tool(timeout_seconds=0.1)
    def hangs_past_its_timeout() -> str:
        """Hang."""
        release.wait(30)
        return "late"

    with pytest.raises(ToolTimeoutError):
        hangs_past_its_timeout.invoke("{}")
    [left] = [t for t in threading.enumerate() if t.name == "tool-hangs_past_its_timeout"]
    assert left.daemon  # the interpreter does not wait for it at exit
    release.set()


def test_a_time_limit_bounds_a_tool_with_no_timeout_and_its_retries() -> None:
    starts = Starts()

    @tool(retry_on=(ConnectionError,), max_retries=5, retry_backoff_seconds=0.3)
    def flaky() -> str:
        """Flaky."""
        starts.add()
        raise ConnectionError("reset")

    @tool
    def hangs() -> str:
        """Hang."""
        time.sleep(30)
        return "late"

    started = time.monotonic()
    with pytest.raises(ToolExecutionError):
        flaky.invoke("{}", time_limit=0.5)
    assert starts.count == 2  # 0.3 s of backoff fits; the next 0.6 s would pass the limit
    with pytest.raises(ToolTimeoutError) as raised:
        hangs.invoke("{}", time_limit=0.3)
    assert str(raised.value) == (
        "Tool 'hangs' timed out after 0.3 s (the time its worker had left). It may still take effect: "
        "check before calling it again."
    )
    assert time.monotonic() - started < 10  # not the 30 s `hangs` would take


def test_an_approval_policy_that_exits_fails_closed() -> None:
    def policy(arguments: dict[str, Any], ctx: ToolContext) -> bool:
        raise SystemExit(1)

    @tool(requires_approval=policy)
    def refund() -> str:
        """Refund."""
        return "refunded"

    assert refund.needs_approval({}, ToolContext(run_id="r", agent="a", call_id="c", caller="x")) is True


@pytest.mark.parametrize("seconds", [float("nan"), 0, -1, float("inf"), True, "5"])
def test_a_timeout_that_is_no_number_of_seconds_is_refused_where_it_is_written(seconds: Any) -> None:
    def fn() -> str:
        """Answer."""
        return "x"

    with pytest.raises(DefinitionError, match="timeout_seconds is a number of seconds above 0"):
        tool(timeout_seconds=seconds)(fn)
    with pytest.raises(DefinitionError, match="tool_timeout_seconds is a number of seconds above 0"):
        Agent(name="a", instructions="x", tools=[], tool_timeout_seconds=seconds)


@pytest.mark.parametrize(("option", "value"), [("retry_backoff_seconds", -1), ("max_retries", -1)])
def test_retries_that_make_no_sense_are_refused(option: str, value: Any) -> None:
    def fn() -> str:
        """Answer."""
        return "x"

    with pytest.raises(DefinitionError, match=option):
        tool(retry_on=(ValueError,), **{option: value})(fn)


@pytest.mark.parametrize("timeout", [None, 5.0])
def test_a_tool_that_returns_a_generator_fails_instead_of_draining_it(timeout: float | None) -> None:
    @tool(timeout_seconds=timeout)
    def numbers() -> Any:
        """Count forever."""
        return itertools.count()

    with pytest.raises(ToolExecutionError, match="a tool returns a value, not a count: return a list"):
        numbers.invoke("{}")


def test_a_message_whose_str_raises_a_base_exception_is_still_said() -> None:
    class Hostile(Exception):
        def __str__(self) -> str:
            raise KeyboardInterrupt

    assert describe_exception(Hostile()) == "Hostile: (its message could not be read)"


def test_a_timed_out_attempt_keeps_none_of_its_state() -> None:
    @tool(timeout_seconds=0.1, retry_on=(ToolTimeoutError,), max_retries=1, idempotent=True, **NO_WAIT)
    def slow_write(ctx: ToolContext) -> str:
        """Write late."""
        ctx.state["paid"] = "half"
        time.sleep(0.3)
        ctx.state["paid"] = "all"
        return "paid"

    context = ToolContext(run_id="r", agent="a", call_id="c")
    with pytest.raises(ToolTimeoutError):
        slow_write.invoke("{}", context)
    time.sleep(0.5)  # both attempts' late writes are in
    assert context.state["paid"] == "all" and context.state.changes() == ({}, [])
