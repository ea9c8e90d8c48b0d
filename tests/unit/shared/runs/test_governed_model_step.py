"""The model step under the rate governor (shared/runs/model_step.py, shared/runs/rate_governor.py):
what a run does while it waits for its slot. The budget on moto; the model is the scripted
OpenAI-compatible server, through the real client."""

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.unit.shared.runs.test_rate_governor import Clock, _governor, _run, budget_table
from tests.unit.shared.runs.test_runs import Reporter, Starter
from toolpipe.infra.local.scripted_model import HttpError, Reply, ScriptedModelServer, ScriptResponder
from toolpipe.shared.agents import AGENTS, Agent
from toolpipe.shared.agents.hooks import BeforeModel, Hooks
from toolpipe.shared.history import MemoryHistoryStore
from toolpipe.shared.messages import DecisionStatus, RunRecord, RunStatus, StepRequest, UserMessage
from toolpipe.shared.model.openai_client import OpenAIModelClient, build_openai_client
from toolpipe.shared.runs import ModelStep
from toolpipe.shared.runs.catalog import RegisteredAgents
from toolpipe.shared.runs.rate_governor import Go
from toolpipe.shared.settings import CallTimeouts


@dataclass
class CountingHooks(Hooks):
    """Counts the before_model hooks the step runs."""

    before_model_calls: int = 0

    def before_model(self, event: BeforeModel) -> None:
        self.before_model_calls += 1


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> CountingHooks:
    counting = CountingHooks()
    agent = Agent(name="counted", instructions="You answer.", hooks=[counting])
    monkeypatch.setitem(AGENTS, agent.name, agent)
    return counting


@pytest.fixture
def table() -> Iterator[object]:
    with budget_table() as created:
        yield created


@pytest.fixture
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(ScriptResponder([Reply(content="done")])) as server:
        yield server


def _step(
    table: object, model: ScriptedModelServer, clock: Clock, taken: bool = True
) -> tuple[ModelStep, MemoryHistoryStore]:
    """The model step, governed, for the run `r1` of the agent "counted"; `taken`: another run
    took the budget's slot first."""
    store = MemoryHistoryStore()
    client = OpenAIModelClient(build_openai_client(model.base_url, "k"), max_retries=0, governed=True)
    # A slot every 3 s, one at a time.
    governor = _governor(table, clock, per_minute=20, burst=1)
    step = ModelStep(
        store,
        client,
        "m",
        CallTimeouts(),
        Reporter(),
        lambda arn: Starter(),
        agents=RegisteredAgents(),
        governor=governor,
    )
    if taken:
        assert isinstance(governor.admit(_run("other"), "m", "1"), Go)
    assert store.create_run(
        RunRecord(run_id="r1", agent="counted", status=RunStatus.RUNNING),
        UserMessage(seq=1, turn=0, content="hi"),
    )
    return step, store


def test_before_model_hooks_run_once_per_model_call_not_per_wake_up(
    table: object, model: ScriptedModelServer, hooks: CountingHooks
) -> None:
    clock = Clock()
    step, _ = _step(table, model, clock)
    waits = []
    for _ in range(10):
        decision = step.step(StepRequest(run_id="r1"), time.monotonic() + 60)
        if decision.status is not DecisionStatus.WAIT:
            break
        waits.append(decision.wait_seconds)
        clock.now += 1  # the Wait state woke early: the run asks again, still before its slot
    assert waits == [3, 2, 1]
    assert decision.status is DecisionStatus.FINAL
    assert len(model.requests) == 1
    assert hooks.before_model_calls == 1


@pytest.mark.parametrize("header", ["retry-after", "retry-after-ms"])
def test_an_absurd_retry_after_ends_the_run_limit_not_the_step(
    table: object, model: ScriptedModelServer, hooks: CountingHooks, header: str
) -> None:
    # 1e306 s: as many milliseconds are past a float's range (math.ceil of inf).
    model.responder = ScriptResponder(
        [HttpError(429, {"error": {"message": "slow down"}}, {header: "1e306"})]
    )
    step, store = _step(table, model, Clock(), taken=False)
    decision = step.step(StepRequest(run_id="r1"), time.monotonic() + 60)
    assert decision.status is DecisionStatus.LIMIT
    run = store.get_run("r1")
    assert run.status is RunStatus.LIMIT
    assert run.error == (
        "the model's rate limit would make the run wait 10000000 s more, past the 3600 s it may wait "
        "in all (TOOLPIPE_MODEL_RATE_MAX_WAIT) (model endpoint answered 429 slow down)"
    )
