"""Fixtures shared by every test layer. Nothing here reaches the internet or real AWS:
AWS calls go to moto, and the model is a scripted OpenAI-compatible server on 127.0.0.1."""

import gc
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# Before anything imports boto3: never real credentials, never a real endpoint.
for _name, _value in {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}.items():
    os.environ[_name] = _value
for _name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
    os.environ.pop(_name, None)
# The CDK CLI (2.1100 and later) sends usage telemetry to AWS from a process of its own after a
# command, unless told not to; the tests run it often, and never reach the internet.
os.environ["CDK_DISABLE_CLI_TELEMETRY"] = "true"
# The CDK's syntheses, in the workers and in the processes tests start, on the Node flags the
# Makefile gives them (infra/cdk/jsii-node: ~0.6x the CPU of a synthesis), with `pytest` alone too.
os.environ.setdefault("JSII_NODE", str(Path(__file__).resolve().parents[1] / "infra" / "cdk" / "jsii-node"))

# Python's automatic full collections, at most one per 100 younger ones (its default: 10). A
# test process starts and stops hundreds of local runtimes; each stop hands all the runtime kept
# frozen back to the collector (`LocalRuntime.__exit__`) with ~30,000 objects of garbage in
# cycles, and each automatic full pass then walks the whole heap of the process, a million objects
# and more in a worker of the suite: 6-8 s of CPU a worker in one run, up to 2.9 s a pass. Fewer
# passes free the same garbage (explicit `gc.collect()`s still run): the functional tests in one
# process took 108 and 118 s of CPU instead of 114 and 132 (docs/design/tests.md).
gc.set_threshold(gc.get_threshold()[0], gc.get_threshold()[1], 100)

# The reliability report's session hooks and the parallel run's scheduling, here because this
# conftest is the one the controller of a parallel run (pytest-xdist) always loads.
from tests.reliability.report import pytest_terminal_summary, pytest_testnodedown  # noqa: E402, F401
from tests.scheduling import pytest_xdist_make_scheduler  # noqa: E402, F401
from toolpipe.infra.local.runtime import LOCAL_CALLER, LocalRuntime  # noqa: E402
from toolpipe.infra.local.scripted_model import DemoResponder, Reply, ScriptedModelServer, ScriptResponder  # noqa: E402
from toolpipe.shared.agents import AGENTS, Agent  # noqa: E402
from toolpipe.shared.tools import ToolContext, tool  # noqa: E402
from toolpipe.testing import call, read_run  # noqa: E402


class Calls:
    """Counts how often each test tool really ran (duplicate deliveries must not add)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def add(self, name: str) -> None:
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + 1


CALLS = Calls()


@tool
def count_once(label: str) -> str:
    """Record that it ran and return the label.

    Args:
        label: Any text.
    """
    CALLS.add("count_once")
    return f"counted {label}"


@tool
def big_output(kilobytes: int) -> str:
    """Return a large text.

    Args:
        kilobytes: How many KB of text.
    """
    return "x" * (kilobytes * 1000)


@tool
def explode(reason: str) -> str:
    """Always fail.

    Args:
        reason: The message of the exception.
    """
    raise RuntimeError(reason)


@tool
def slow(seconds: float) -> str:
    """Sleep, then answer.

    Args:
        seconds: How long to sleep.
    """
    time.sleep(seconds)
    return "woke up"


@tool
def remember(key: str, value: str, ctx: ToolContext) -> str:
    """Store a value for later calls of this run.

    Args:
        key: Name of the value.
        value: The value.
    """
    ctx.state[key] = value
    return f"stored {key} for {ctx.caller}"


@tool
def recall(key: str, ctx: ToolContext) -> str:
    """Read a value an earlier call stored.

    Args:
        key: Name of the value.
    """
    return str(ctx.state.get(key, "nothing"))


@tool(retry_on=(ConnectionError,), max_retries=2, retry_backoff_seconds=0.01)
def flaky(failures: int) -> str:
    """Fail with a connection error this many times, then answer.

    Args:
        failures: How many attempts fail first.
    """
    CALLS.add("flaky")
    if CALLS.counts["flaky"] <= failures:
        raise ConnectionError("connection reset")
    return f"answered on attempt {CALLS.counts['flaky']}"


@tool(return_direct=True)
def render_report(title: str) -> str:
    """Render the final report; its text is the run's answer.

    Args:
        title: The report's title.
    """
    return f"# {title}\nAll good."


TEST_AGENT = Agent(
    name="tester",
    instructions="You test toolpipe.",
    tools=[count_once, big_output, explode, slow, remember, recall, render_report, flaky],
    max_iterations=4,
)


@pytest.fixture(autouse=True)
def test_agent(monkeypatch: pytest.MonkeyPatch) -> Agent:
    monkeypatch.setitem(AGENTS, TEST_AGENT.name, TEST_AGENT)
    CALLS.counts.clear()
    return TEST_AGENT


class Capture:
    """Stands in for stdout: what a CLI command printed."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    @property
    def text(self) -> str:
        return "".join(self.parts)


@dataclass
class Pipeline:
    runtime: LocalRuntime
    model: ScriptedModelServer
    # Who started each run: only that identity may read it back.
    callers: dict[str, str] = field(default_factory=dict)

    def script(self, *replies: Any) -> None:
        self.model.responder = ScriptResponder(list(replies))

    def start(self, prompt: str, agent: str = "tester", caller: str = LOCAL_CALLER, **fields: Any) -> str:
        status, body = self.runtime.api(
            "POST", "/runs", {"prompt": prompt, "agent": agent, **fields}, caller=caller
        )
        assert status == 202, body
        self.callers[body["run_id"]] = caller
        return str(body["run_id"])

    def finish(self, run_id: str, timeout: float = 60) -> dict[str, Any]:
        """The run once it ended: `GET /runs/{id}`, with every whole history item under
        "messages" (read page by page, long items one by one)."""
        self.runtime.wait_for_execution(run_id, timeout)
        return read_run(self.runtime, run_id, self.callers.get(run_id, LOCAL_CALLER))


def _pipeline(extra_env: dict[str, str] | None = None, **kwargs: Any) -> Iterator[Pipeline]:
    with ScriptedModelServer(DemoResponder()) as model:
        env = {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "scripted", **(extra_env or {})}
        with LocalRuntime(extra_env=env, **kwargs) as runtime:
            yield Pipeline(runtime, model)


@pytest.fixture
def pipeline() -> Iterator[Pipeline]:
    yield from _pipeline()


__all__ = ["CALLS", "TEST_AGENT", "Capture", "Pipeline", "Reply", "_pipeline", "call", "json"]


# A tool that holds its call open until a test opens the gate: a run that waits on a tool.
GATE = threading.Event()
GATE_REACHED = threading.Event()  # set when a call starts waiting at the gate


@tool
def wait_for_gate(label: str) -> str:
    """Wait until the test opens the gate, then answer.

    Args:
        label: Any text.
    """
    GATE_REACHED.set()
    GATE.wait(20)
    return f"passed {label}"


def gated_server(
    monkeypatch: pytest.MonkeyPatch, agent: Agent, extra_env: dict[str, str] | None = None
) -> Iterator[tuple[Pipeline, Any]]:
    """A pipeline with `agent` registered and a local HTTP server in front of it; the gate is
    closed while the test runs and opened after, before the runtime stops (its stop waits for
    a run held at the gate), so no worker is left waiting on it."""
    from toolpipe.infra.local.server import LocalServer

    monkeypatch.setitem(AGENTS, agent.name, agent)
    GATE.clear()
    for pipeline in _pipeline(extra_env):
        with LocalServer(pipeline.runtime) as server:
            try:
                yield pipeline, server
            finally:
                GATE.set()
