"""Test your agents offline: the whole pipeline in your test's process, with a scripted model.

    from toolpipe.testing import LocalPipeline, Reply, call

    def test_weather() -> None:
        with LocalPipeline() as pipeline:
            pipeline.script(Reply(tool_calls=[call("get_weather", city="Paris")]), Reply(content="Sunny."))
            run = pipeline.run("Weather in Paris?")
        assert run.status == "succeeded" and run.output == "Sunny."
        assert run.tool_results == ["Sunny, 21 °C in Paris"]

The AWS services are emulated (moto) and the model is a real OpenAI-compatible HTTP server on
127.0.0.1 answering from your script, so the real `openai` client, state machine, queue and
tool workers run. Your app's agents are found as `toolpipe run` finds them (`[tool.toolpipe]
app` in your pyproject.toml, or `TOOLPIPE_APP`).
"""

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from toolpipe.infra.local.runtime import LOCAL_CALLER, LocalRuntime
from toolpipe.infra.local.scripted_model import Reply, ScriptedModelServer, ScriptResponder
from toolpipe.shared.agents import AGENTS
from toolpipe.shared.agents.app import Loaded, loaded, put_back
from toolpipe.shared.app_ref import APP_ENV, APP_PATH_ENV, AppRef, use_app, valid_module_name

__all__ = ["LocalPipeline", "Reply", "RunResult", "call", "read_run"]

# How often `LocalPipeline.run(decide=...)` looks for calls that wait for a person.
APPROVAL_POLL_SECONDS = 0.1


def call(tool: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    """A tool call for `Reply(tool_calls=[...])`: the tool's name and its arguments."""
    return (tool, arguments)


@dataclass(frozen=True)
class RunResult:
    run_id: str
    status: str  # succeeded, failed, limit, cancelled
    output: str | None
    error: str | None
    messages: list[dict[str, Any]] = field(default_factory=list)  # the whole history, in order
    # Who answered: the agents a handoff moved the run to, in order ({turn, kind, from_agent, to_agent}).
    handoffs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def agents(self) -> list[str]:
        """The agent of each model reply, in order (a handoff changes it)."""
        return [str(m.get("agent")) for m in self.messages if m.get("kind") == "assistant"]

    @property
    def tool_results(self) -> list[str]:
        """Each tool result's text, in history order."""
        return [str(m.get("content")) for m in self.messages if m.get("kind") == "tool_result"]


def read_run(runtime: LocalRuntime, run_id: str, caller: str = LOCAL_CALLER) -> dict[str, Any]:
    """`GET /runs/{id}`, with every whole history item under "messages" (read page by page,
    long items one by one)."""
    status, body = runtime.api("GET", f"/runs/{run_id}", caller=caller)
    if status != 200:
        raise LookupError(f"run {run_id}: {body.get('message', body)}")
    messages: list[dict[str, Any]] = []
    page: str | None = f"/runs/{run_id}/messages"
    while page is not None:
        status, listed = runtime.api("GET", page, caller=caller)
        if status != 200:
            raise LookupError(f"run {run_id}: {listed.get('message', listed)}")
        for item in listed["messages"]:
            if "ref" in item:
                status, item = runtime.api("GET", item["ref"], caller=caller)
                if status != 200:
                    raise LookupError(f"run {run_id}: {item.get('message', item)}")
            messages.append(item)
        page = listed["next"]
    return {**body, "messages": messages}


class LocalPipeline:
    """The pipeline, emulated in this process, and a scripted model; a context manager."""

    def __init__(self, *replies: Reply, app: str | None = None, workers: int = 4) -> None:
        """`app`: your module that defines the agents; by default the one `toolpipe run` finds
        (`TOOLPIPE_APP`, else the nearest pyproject.toml's `[tool.toolpipe] app`)."""
        self._model = ScriptedModelServer(ScriptResponder(list(replies)))
        self._app = app
        self._saved_app: tuple[str | None, str | None] | None = None
        self._saved_agents: Loaded | None = None
        self._workers = workers
        self._runtime: LocalRuntime | None = None

    def __enter__(self) -> "LocalPipeline":
        if self._app is not None:  # named for this pipeline only; put back as it was after
            self._saved_app = (os.environ.get(APP_ENV), os.environ.get(APP_PATH_ENV))
            self._saved_agents = loaded(AGENTS)  # its agents are this pipeline's alone, too
            use_app(AppRef(valid_module_name(self._app, "LocalPipeline(app=...)")))
        self._model.__enter__()
        env = {"OPENAI_BASE_URL": self._model.base_url, "OPENAI_API_KEY": "scripted"}
        try:
            self._runtime = LocalRuntime(extra_env=env, workers=self._workers).__enter__()
        except BaseException:
            self._model.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        try:
            if self._runtime is not None:
                self._runtime.__exit__(kind, error, trace)
        finally:
            self._runtime = None
            self._model.__exit__(kind, error, trace)
            if self._saved_app is not None:
                for name, value in zip((APP_ENV, APP_PATH_ENV), self._saved_app, strict=True):
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
                self._saved_app = None
            if self._saved_agents is not None:
                put_back(self._saved_agents, AGENTS)
                self._saved_agents = None

    def script(self, *replies: Reply) -> None:
        """What the model answers next, one reply per model call; replaces any earlier script."""
        self._model.responder = ScriptResponder(list(replies))

    def run(
        self,
        prompt: str,
        agent: str | None = None,
        timeout: float = 60,
        decide: Callable[[dict[str, Any]], Any] | None = None,
        **fields: Any,
    ) -> RunResult:
        """Start a run (as `POST /runs` does), wait until it ends, and read it back whole.
        `fields`: the other fields of a run request (`timezone`, `tools`, `metadata`).
        `decide`: a person, for calls that need approval: given each approval as
        `GET /approvals/{id}` shows it, True approves, a string denies with that reason. For a
        deferred call (`kind` "human" or "client") what it returns is the answer, or the result
        the program posts. Without it, such calls wait until they expire."""
        runtime = self._running()
        body: dict[str, Any] = {"input": prompt, **fields}
        if agent is not None:
            body["agent"] = agent
        status, started = runtime.api("POST", "/runs", body, caller=LOCAL_CALLER)
        if status != 202:
            raise ValueError(f"the run was refused ({status}): {started.get('message', started)}")
        run_id = str(started["run_id"])
        deadline = time.monotonic() + timeout
        while True:
            try:
                runtime.wait_for_execution(run_id, timeout if decide is None else APPROVAL_POLL_SECONDS)
                break
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise
            assert decide is not None
            _, listed = runtime.api("GET", "/approvals?status=pending", caller=LOCAL_CALLER)
            for approval in listed["approvals"]:
                if approval["run_id"] != run_id:
                    continue
                runtime.api(*_decision(approval, decide(approval)), caller=LOCAL_CALLER)
        shown = read_run(runtime, run_id)
        run = shown["run"]
        return RunResult(
            run_id,
            run["status"],
            run.get("output"),
            run.get("error"),
            shown["messages"],
            run.get("handoffs") or [],
        )

    @property
    def runtime(self) -> LocalRuntime:
        """The local runtime the pipeline runs on (its AWS clients: `sqs`, `s3`, `ses`…)."""
        return self._running()

    def _running(self) -> LocalRuntime:
        if self._runtime is None:
            raise RuntimeError("use LocalPipeline in a `with` block")
        return self._runtime


def _decision(approval: dict[str, Any], answer: Any) -> tuple[str, str, dict[str, Any] | None]:
    """The request that gives `answer` to a waiting call, by what the call waits for."""
    kind = approval.get("kind", "approval")
    if kind == "human":
        return "POST", f"/approvals/{approval['approval_id']}/answer", {"answer": answer}
    if kind == "client":
        return "POST", f"/runs/{approval['run_id']}/calls/{approval['seq']}/result", {"result": answer}
    if answer is True:
        return "POST", f"/approvals/{approval['approval_id']}/approve", None
    return "POST", f"/approvals/{approval['approval_id']}/deny", {"reason": str(answer)}
