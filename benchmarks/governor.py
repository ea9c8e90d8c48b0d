"""The model's rate governor under load: concurrent runs against an endpoint with a rate limit.

    python -m benchmarks.governor           # 20 runs, 4 model calls each, endpoint 60 a minute
    python -m benchmarks.governor --quick   # 5 runs, 2 calls each, 60 a minute (seconds)

The scripted endpoint answers 429 with Retry-After above its limit (`EndpointRateLimit`); the
governor has the same rate (TOOLPIPE_MODEL_RATE_PER_MINUTE). Figures: runs that did not succeed,
requests the endpoint refused, the most it served in any minute (its limit plus its burst is
what it allows), the longest model step (a Lambda that slept through a wait would show it), and
the waits the state machine held instead. Figures, not pass/fail; the quick mode is run by `make test`.
"""

import argparse
import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

BURST = 2


@dataclass(frozen=True)
class Load:
    runs: int
    turns: int  # tool turns before the answer: turns + 1 model calls a run
    per_minute: int


FULL = Load(runs=20, turns=3, per_minute=60)
# 10 calls at one a second after a burst of 2 take 8 s at least, so some wait on any machine: at
# 600 a minute a slow machine (2026-12-01) spread the runs' calls enough that none had to.
QUICK = Load(runs=5, turns=1, per_minute=60)


def _responder(turns: int) -> Any:
    from toolpipe.infra.local.scripted_model import Reply

    def respond(request: dict[str, Any]) -> Any:
        done = sum(1 for m in request.get("messages", []) if m.get("role") == "assistant")
        return Reply(tool_calls=[("sum", {"a": done, "b": 1})]) if done < turns else Reply(content="done")

    return respond


@contextmanager
def governed_runtime(load: Load, governed: bool = True) -> Iterator[tuple[Any, Any]]:
    """The local runtime and its scripted endpoint, both at `load.per_minute` (burst `BURST`);
    not `governed`: the endpoint's limit only, each run retrying its 429s in the orchestrator."""
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    from assistant.agents import sum as sum_tool

    from benchmarks.runtime import bench_env
    from toolpipe.infra.local.runtime import LocalRuntime
    from toolpipe.infra.local.scripted_model import EndpointRateLimit, ScriptedModelServer
    from toolpipe.shared.agents import AGENTS, Agent

    AGENTS["bench_governor"] = Agent(
        name="bench_governor", instructions="Sum.", tools=[sum_tool], max_iterations=50
    )
    rate = {
        "TOOLPIPE_MODEL_RATE_PER_MINUTE": str(load.per_minute if governed else 0),
        "TOOLPIPE_MODEL_RATE_BURST": str(BURST),
    }
    with ScriptedModelServer(_responder(load.turns)) as model:
        model.rate_limit = EndpointRateLimit(per_minute=load.per_minute, burst=BURST)
        with LocalRuntime(extra_env={**bench_env(model.base_url), **rate}) as runtime:
            yield runtime, model


def _status(view: dict[str, Any]) -> str:
    run = view.get("run", view)
    return str(run["status"])


def most_in_a_window(arrivals: list[float], seconds: float) -> int:
    """The most arrivals within any `seconds` (a window that starts at an arrival)."""
    ordered, most, first = sorted(arrivals), 0, 0
    for last, at in enumerate(ordered):
        while at - ordered[first] >= seconds:
            first += 1
        most = max(most, last - first + 1)
    return most


def measure(load: Load, governed: bool = True) -> dict[str, Any]:
    with governed_runtime(load, governed) as (runtime, model):
        started = time.perf_counter()

        def one(i: int) -> str:
            status, body = runtime.api("POST", "/runs", {"prompt": f"run {i}", "agent": "bench_governor"})
            assert status == 202, body
            return str(body["run_id"])

        with ThreadPoolExecutor(load.runs) as pool:
            run_ids = list(pool.map(one, range(load.runs)))
        timeout = 120 + load.runs * (load.turns + 1) * 60 / load.per_minute * 2
        ended = [runtime.wait_for_execution(run_id, timeout=timeout) for run_id in run_ids]
        elapsed = time.perf_counter() - started
        statuses = [_status(runtime.api("GET", f"/runs/{run_id}")[1]) for run_id in run_ids]
        histories = [runtime.execution_events(run_id) for run_id in run_ids]
    steps_ms, waits, waited_s = [], 0, 0.0
    for events in histories:
        started_at = [e["timestamp"] for e in events if e["type"] == "TaskStarted"]
        ended_at = [e["timestamp"] for e in events if e["type"] in ("TaskSucceeded", "TaskFailed")]
        steps_ms += [(b - a).total_seconds() * 1000 for a, b in zip(started_at, ended_at, strict=False)]
        entered = [e for e in events if e["type"] == "WaitStateEntered"]
        for wait in entered:
            if wait["stateEnteredEventDetails"]["name"] != "WaitForModel":
                continue
            waits += 1
            left = next(e for e in events if e["type"] == "WaitStateExited" and e["id"] > wait["id"])
            waited_s += (left["timestamp"] - wait["timestamp"]).total_seconds()
    # Within any minute the endpoint serves its rate plus its burst; over a shorter run, pro rata.
    window = 60.0
    allowed = load.per_minute + BURST
    steps_ms.sort()
    return {
        "governed": governed,
        "runs": load.runs,
        "model_calls_per_run": load.turns + 1,
        "endpoint_per_minute": load.per_minute,
        "burst": BURST,
        "runs_not_succeeded": sum(s != "succeeded" for s in statuses),
        "executions_not_succeeded": sum(e["status"] != "SUCCEEDED" for e in ended),
        "requests_served": len(model.arrivals),
        "requests_refused_429": model.rate_limited,
        "most_served_in_a_minute": most_in_a_window(model.arrivals, window),
        "endpoint_allows_in_a_minute": allowed,
        "longest_model_step_ms": round(steps_ms[-1]),
        "median_model_step_ms": round(steps_ms[len(steps_ms) // 2]),
        # What the orchestrator was billed for in all: a Lambda that sleeps through waits shows here.
        "model_steps_s": round(sum(steps_ms) / 1000, 1),
        "state_machine_waits": waits,
        "state_machine_waited_s": round(waited_s, 1),
        "wall_s": round(elapsed, 1),
        "load_1min": round(os.getloadavg()[0], 2),
    }


def report(load: Load, governed: bool = True) -> dict[str, Any]:
    figures = measure(load, governed)
    how = "governed at the same rate" if governed else "not governed (each run retries its 429s)"
    print(
        f"{figures['runs']} runs x {figures['model_calls_per_run']} model calls against an endpoint that "
        f"allows {figures['endpoint_per_minute']} a minute (burst {figures['burst']}), {how}:"
    )
    print(
        f"  runs not succeeded: {figures['runs_not_succeeded']}; requests refused (429): "
        f"{figures['requests_refused_429']} of {figures['requests_served'] + figures['requests_refused_429']}; "
        f"most served in a minute: {figures['most_served_in_a_minute']} (allowed {figures['endpoint_allows_in_a_minute']})"
    )
    print(
        f"  waits in the state machine: {figures['state_machine_waits']} ({figures['state_machine_waited_s']} s in all); "
        f"model steps: {figures['model_steps_s']} s in all, median {figures['median_model_step_ms']} ms, "
        f"longest {figures['longest_model_step_ms']} ms; {figures['wall_s']} s wall, load {figures['load_1min']}"
    )
    print(json.dumps(figures))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 runs at 60 a minute: seconds, for make test")
    parser.add_argument("--compare", action="store_true", help="then the same load with no governor")
    args = parser.parse_args()
    load = QUICK if args.quick else FULL
    report(load)
    if args.compare:
        report(load, governed=False)


if __name__ == "__main__":
    main()
