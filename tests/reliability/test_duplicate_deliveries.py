"""Scenario 1: SQS delivers at least once. 1,000 tool calls, 10% of them delivered twice and 5%
delivered twice at the same moment: no side effect of a non-idempotent tool twice, no result
lost, every waiting task answered."""

import json
import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import CALLS, Pipeline, _pipeline, call
from tests.functional.test_resilience import deliver, waiting_calls
from tests.reliability.figures import record
from tests.reliability.harness import (
    AGENT,
    EFFECTS,
    RELIABLE_AGENT,
    NoStarter,
    RecordingReporter,
    moto_tables,
    seed_run,
)
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS
from toolpipe.shared.messages import ToolCallMessage, ToolResult
from toolpipe.shared.runs import ToolCallExecutor
from toolpipe.shared.runs.errors import CallInProgressError

CALLS_IN_ALL = int(__import__("os").environ.get("REL_N", "1000"))
CALLS_PER_RUN = 10
DUPLICATE_SHARE = 0.10
CONCURRENT_SHARE = 0.05
LEASE_SECONDS = 150
RUNS_PER_TABLE = 5  # what the worker handler passes: remaining time + margin


@pytest.fixture(autouse=True)
def reliable_agent(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(AGENTS, AGENT, RELIABLE_AGENT)
    EFFECTS.clear()
    yield
    EFFECTS.clear()


def _deliver(executor: ToolCallExecutor, message: ToolCallMessage) -> str:
    """One delivery as the handler makes it: 'done', or 'retry' when another delivery holds
    the call (the handler reports it in batchItemFailures and SQS delivers it again)."""
    try:
        executor.execute(message, lease_seconds=LEASE_SECONDS)
    except CallInProgressError:
        return "retry"
    return "done"


def _concurrently(executor: ToolCallExecutor, message: ToolCallMessage) -> list[str]:
    barrier = threading.Barrier(2)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def one() -> None:
        barrier.wait()
        try:
            outcomes.append(_deliver(executor, message))
        except BaseException as e:  # surfaced below: a crash is a finding, not a hang
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return outcomes


def test_duplicate_and_concurrent_deliveries_do_not_duplicate_or_lose_calls() -> None:
    rng = random.Random(1)
    reporter = RecordingReporter()
    with moto_tables() as tables:
        messages: list[tuple[ToolCallMessage, str, ToolCallExecutor]] = []
        for r in range(CALLS_IN_ALL // CALLS_PER_RUN):
            if r % RUNS_PER_TABLE == 0:
                store = tables.store(f"dup-{r}")
                executor = ToolCallExecutor(store, reporter, NoStarter(), heartbeat_every=60)
            run_id = f"dup-{r}"
            # Mostly non-idempotent tools: they are the ones a duplicate would harm.
            tools = ["upsert" if rng.random() < 0.2 else "charge" for _ in range(CALLS_PER_RUN)]
            slots = seed_run(store, run_id, [(t, json.dumps({"label": f"{r}"})) for t in tools])
            for seq, name in zip(slots, tools, strict=True):
                message = ToolCallMessage(
                    run_id=run_id, seq=seq, message_seq=2, task_token=f"tok-{run_id}-{seq}"
                )
                messages.append((message, name, executor))

        duplicated_deliveries = concurrent_deliveries = retries = 0
        for message, _, executor in messages:
            draw = rng.random()
            if draw < CONCURRENT_SHARE:
                concurrent_deliveries += 1
                outcomes = _concurrently(executor, message)
                # The delivery that found the call held comes back after the visibility timeout.
                for _ in range(outcomes.count("retry")):
                    retries += 1
                    assert _deliver(executor, message) == "done"
            elif draw < CONCURRENT_SHARE + DUPLICATE_SHARE:
                duplicated_deliveries += 1
                assert _deliver(executor, message) == "done"
                assert _deliver(executor, message) == "done"
            else:
                assert _deliver(executor, message) == "done"

        lost = duplicated = survived = 0
        non_idempotent_twice = 0
        for message, name, executor in messages:
            key = f"{message.run_id}:{message.seq}"
            result = executor._store.get_item(message.run_id, message.seq)
            answers = reporter.answers.get(message.task_token, [])
            ok = isinstance(result, ToolResult) and result.status == "ok" and bool(answers)
            ok = ok and all(a == {"seq": message.seq, "status": "ok"} for a in answers)
            runs = EFFECTS.counts[key]
            if runs > 1:
                duplicated += 1
                non_idempotent_twice += name == "charge"
            if not ok or runs == 0:
                lost += 1
            elif runs == 1:
                survived += 1

    met = lost == 0 and duplicated == 0
    record(
        "1 duplicate + concurrent deliveries (1,000 calls, executor on moto)",
        tried=len(messages),
        survived=survived,
        lost=lost,
        duplicated=duplicated,
        goal="0 lost, 0 duplicated",
        met=met,
        note=(
            f"{duplicated_deliveries} calls delivered twice in a row, {concurrent_deliveries} delivered "
            f"twice at once on two threads ({retries} of those deliveries found the call held and were "
            "delivered again, as SQS would after the visibility timeout); task tokens stay open after an "
            "answer, so the ledger alone stops re-runs. 80% of calls are to a non-idempotent tool."
        ),
    )
    assert non_idempotent_twice == 0
    assert met


def _deliver_at_once(message: dict[str, Any]) -> list[dict[str, Any]]:
    responses: list[dict[str, Any]] = []
    barrier = threading.Barrier(2)

    def one(n: int) -> None:
        barrier.wait()
        responses.append(deliver(message, f"m-{n}"))

    threads = [threading.Thread(target=one, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return responses


@pytest.fixture
def held() -> Iterator[Pipeline]:
    yield from _pipeline(workers=0)


def test_duplicate_deliveries_through_the_real_pipeline(held: Pipeline) -> None:
    """A smaller part through the real worker handler, with real task tokens from moto's
    Step Functions: every message delivered twice, a third of them twice at once."""
    runs = 3
    per_run = 10
    held.script(
        *[
            Reply(tool_calls=[call("count_once", label=f"{r}-{i}") for i in range(per_run)])
            for r in range(runs)
        ],
        *[Reply(content="done") for _ in range(runs)],
    )
    run_ids: list[str] = []
    messages: list[dict[str, Any]] = []
    for r in range(runs):
        run_ids.append(held.start(f"count {r}"))
        messages.extend(waiting_calls(held, per_run))
    concurrent = 0
    for i, message in enumerate(messages):
        if i % 3 == 0:
            concurrent += 1
            responses = _deliver_at_once(message)
            if any(r["batchItemFailures"] for r in responses):
                assert deliver(message, "m-again") == {"batchItemFailures": []}
        else:
            for n in range(2):
                assert deliver(message, f"m-{n}") == {"batchItemFailures": []}

    statuses = [held.finish(run_id)["run"]["status"] for run_id in run_ids]
    survived = (
        statuses.count("succeeded") * per_run if CALLS.counts.get("count_once") == runs * per_run else 0
    )
    duplicated = max(0, CALLS.counts.get("count_once", 0) - runs * per_run)
    lost = runs * per_run - min(CALLS.counts.get("count_once", 0), runs * per_run)
    met = statuses == ["succeeded"] * runs and duplicated == 0 and lost == 0
    record(
        "1b duplicate + concurrent deliveries (real pipeline)",
        tried=runs * per_run,
        survived=survived,
        lost=lost,
        duplicated=duplicated,
        goal="0 lost, 0 duplicated, runs succeed",
        met=met,
        note=f"real worker handler and task tokens; every message delivered twice, {concurrent} of them on two threads at once.",
    )
    assert met
