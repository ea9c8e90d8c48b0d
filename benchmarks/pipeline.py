"""Prints figures for the local pipeline, its peers and the handlers' cold starts.

    make bench            # or: python -m benchmarks.pipeline --repeats 5
    python -m benchmarks.pipeline --quick     # seconds, every part once (make test runs it)

First, the functions' cold starts and bundle sizes (benchmarks/coldstart.py, which also runs
alone: `python -m benchmarks.coldstart`).

Everything runs in one process against one scripted OpenAI-compatible server on 127.0.0.1
(benchmarks/loops.py): the bare `openai` client's loop (call the model, run the tool, append,
again), the OpenAI Agents SDK's run loop and Pydantic AI's (`pip install '.[bench]'`; skipped,
with a note, when absent) and toolpipe's local runtime, each driving the same N tool turns; then
the fan-out, the memory a long-lived runtime keeps per run, and the idle runtime's CPU; then
start-up, from a fresh interpreter to ready to run (benchmarks/startup.py). Last, what a
reference run costs on AWS beside the peer design's model (benchmarks/cost.py, which also runs
alone: `python -m benchmarks.cost`).

"Overhead per tool turn" is how much longer a loop takes than the bare client's, divided by N;
"CPU per turn" is the same for the process's CPU time (every thread's, the runtime's workers
included). Both are the median over rounds that run each loop once, side by side (3 *
`--repeats` rounds at 10 turns, `--repeats` / 2 at 50), so a slow moment of a noisy machine
slows all the loops of its round alike. Figures, not pass/fail: compare them across changes on
the same machine (benchmarks/guard.py is the pass/fail part).
"""

import argparse
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks import startup
from benchmarks.loops import (
    PEER_NAMES,
    Sample,
    bare_loop,
    missing_peers,
    peer_loops,
    prompt,
    timed,
    turns_responder,
)

FAN_OUT = 10
MEMORY_RUNS = 100


@dataclass(frozen=True)
class Plan:
    """How much to measure: `make bench`'s figures, or `--quick`'s (every part, once, small)."""

    repeats: int
    turns: tuple[int, ...] = (10, 50)
    tool_seconds: float = 1.0
    fan_out: int = FAN_OUT
    fan_rounds: int = 0  # 0: max(3, repeats / 2)
    memory_runs: int = MEMORY_RUNS
    memory_turns: int = 10
    idle_seconds: float = 3.0
    serve_samples: int = 3
    startup_rounds: int = 3
    # The peers' start-up too: their imports are seconds each, so --quick measures toolpipe's alone.
    peers_startup: bool = True

    @classmethod
    def quick(cls) -> "Plan":
        return cls(
            repeats=1,
            turns=(3,),
            tool_seconds=0.1,
            fan_out=3,
            fan_rounds=1,
            memory_runs=2,
            memory_turns=3,
            idle_seconds=0.3,
            serve_samples=1,
            startup_rounds=1,
            peers_startup=False,
        )

    def rounds(self, turns: int) -> int:
        # Short runs get more rounds (a 10-turn run is ~0.2 s).
        return 3 * self.repeats if turns == min(self.turns) else max(1, self.repeats // 2)


def _register_bench_agent(tool_seconds: float) -> None:
    from assistant.agents import sum

    from toolpipe.shared.agents import AGENTS, Agent
    from toolpipe.shared.tools import tool

    @tool
    def wait_a_second(n: int) -> str:
        """Wait one second (a tenth with --quick), as a slow API call would.

        Args:
            n: Which call this is.
        """
        time.sleep(tool_seconds)
        return f"waited {n}"

    AGENTS["bench"] = Agent(
        name="bench",
        instructions="Count.",
        tools=[sum, wait_a_second],
        max_iterations=1000,
        max_tool_calls=10_000,
        max_identical_calls=1000,
    )


def serve_ready_ms() -> float:
    """From `toolpipe serve` starting (a fresh interpreter, an empty state folder) to its URL."""
    with tempfile.TemporaryDirectory() as state:
        started = time.perf_counter()
        server = subprocess.Popen(
            [sys.executable, "-m", "toolpipe.infra.cli", "serve", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "POWERTOOLS_LOG_LEVEL": "ERROR", "TOOLPIPE_HOME": state},
        )
        try:
            assert server.stdout is not None
            for line in server.stdout:
                if line.startswith("toolpipe server at"):
                    return (time.perf_counter() - started) * 1000
            raise RuntimeError("toolpipe serve ended before it was ready")
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=30)


def _rss_kib() -> float | None:
    """The process's resident memory after a full collection, KiB; None without Linux's /proc."""
    gc.collect()
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024
    except OSError:
        return None


def side_by_side(rounds: int, loops: dict[str, Callable[[], Sample]]) -> dict[str, list[Sample]]:
    """Each loop's samples over `rounds` rounds of one run each, after one warm-up round."""
    for measure in loops.values():
        measure()  # warm-up: imports, connections, caches
    samples: dict[str, list[Sample]] = {name: [] for name in loops}
    for _ in range(rounds):
        for name, measure in loops.items():
            samples[name].append(measure())
    return samples


def per_turn_above(samples: list[Sample], bare: list[Sample], turns: int) -> tuple[float, float]:
    """The median of each round's wall and CPU ms above the bare loop's, per turn."""
    wall = statistics.median((s.wall - b.wall) / turns for s, b in zip(samples, bare, strict=True))
    cpu = statistics.median((s.cpu - b.cpu) / turns for s, b in zip(samples, bare, strict=True))
    return wall * 1000, cpu * 1000


def loop_figures(plan: Plan, base_url: str, toolpipe: Callable[[str], Sample]) -> dict[str, Any]:
    """Each loop's run and, above the bare loop's, its overhead and CPU per turn, by turns."""
    out: dict[str, Any] = {}
    for turns in plan.turns:
        loops: dict[str, Callable[[], Sample]] = {
            "bare": lambda: bare_loop(base_url, turns),  # noqa: B023
            "toolpipe": lambda: toolpipe(prompt(turns)),  # noqa: B023
            **peer_loops(base_url, turns),
        }
        samples = side_by_side(plan.rounds(turns), loops)
        out[f"bare_{turns}_ms"] = statistics.median(s.wall for s in samples["bare"]) * 1000
        for name in loops.keys() - {"bare"}:
            out[f"{name}_{turns}_ms"] = statistics.median(s.wall for s in samples[name]) * 1000
            wall, cpu = per_turn_above(samples[name], samples["bare"], turns)
            out[f"{name}_overhead_{turns}_ms"], out[f"{name}_cpu_{turns}_ms"] = wall, cpu
    return out


def startup_figures(plan: Plan) -> dict[str, Any]:
    """From a fresh interpreter to ready to run, toolpipe's `LocalPipeline` and each loop's,
    side by side: the medians of wall time; and `LocalPipeline`'s start as benchmarks/guard.py
    guards it, its CPU time over `import boto3`'s in the same round (the median ratio)."""
    loops = ["bare", *(n for n in PEER_NAMES if n not in missing_peers())] if plan.peers_startup else []
    names = ["boto3", "local_pipeline", *loops]
    samples = startup.rounds(names, plan.startup_rounds)
    out: dict[str, Any] = {}
    for name in names:
        out[f"ready_{name}_ms"] = statistics.median(s.wall for s in samples[name]) * 1000
        out[f"ready_{name}_import_ms"] = statistics.median(s.import_wall for s in samples[name]) * 1000
    pipeline = samples["local_pipeline"]
    out["local_pipeline_start_ms"] = statistics.median(s.setup_wall for s in pipeline) * 1000
    out["local_pipeline_start_cpu_ms"] = statistics.median(s.setup_cpu for s in pipeline) * 1000
    out["local_pipeline_start_per_boto3"] = startup.median_ratio(
        [s.setup_cpu for s in pipeline], [s.import_cpu for s in samples["boto3"]]
    )
    return out


def figures(plan: Plan) -> dict[str, Any]:
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    from benchmarks.runtime import bench_runtime
    from toolpipe.infra.local.scripted_model import ScriptedModelServer

    _register_bench_agent(plan.tool_seconds)
    out: dict[str, Any] = {"load": os.getloadavg()[0]}
    out["serve_ready_ms"] = statistics.median(serve_ready_ms() for _ in range(plan.serve_samples))
    with ScriptedModelServer(turns_responder) as model:
        started = time.perf_counter()
        with bench_runtime(model.base_url) as runtime:
            out["startup_ms"] = (time.perf_counter() - started) * 1000

            def toolpipe(text: str) -> Sample:
                with timed() as timer:
                    status, body = runtime.api("POST", "/runs", {"prompt": text, "agent": "bench"})
                    assert status == 202, body
                    described = runtime.wait_for_execution(body["run_id"], timeout=60)
                if described["status"] != "SUCCEEDED":
                    raise RuntimeError(
                        f"run {body['run_id']}: {runtime.api('GET', '/runs/' + body['run_id'])}"
                    )
                return timer.sample

            out.update(loop_figures(plan, model.base_url, toolpipe))

            # Side by side too, and at least three rounds: one slow second moves a pair.
            fan = side_by_side(
                plan.fan_rounds or max(3, plan.repeats // 2),
                {"one": lambda: toolpipe("wait 1"), "many": lambda: toolpipe(f"wait {plan.fan_out}")},
            )
            out["fan_out_1_ms"] = statistics.median(s.wall for s in fan["one"]) * 1000
            out["fan_out_ms"] = statistics.median(s.wall for s in fan["many"]) * 1000
            out["fan_out_ratio"] = statistics.median(
                m.wall / o.wall for m, o in zip(fan["many"], fan["one"], strict=True)
            )

            # What a long-lived runtime keeps per run: its items, its execution and its history
            # events stay in memory, as they stay in AWS. Resident memory, so the allocator's own
            # growth counts too: a figure to compare across changes, not a census.
            before = _rss_kib()
            if before is not None:
                for _ in range(plan.memory_runs):
                    toolpipe(prompt(plan.memory_turns))
                after = _rss_kib()
                assert after is not None
                out["memory_kib_per_run"] = (after - before) / plan.memory_runs

            idle = threading.Event()
            cpu, wall = time.process_time(), time.perf_counter()
            idle.wait(plan.idle_seconds)  # the runtime running, nothing to do
            out["idle_cpu_percent"] = (time.process_time() - cpu) / (time.perf_counter() - wall) * 100
    out.update(startup_figures(plan))
    out["load_after"] = os.getloadavg()[0]
    return out


def _ratio(top: float, bottom: float) -> str:
    """top / bottom, or why not: a peer's figure can be within the noise of zero."""
    return f"{top / bottom:.1f}x" if bottom >= 0.1 else "n/a (theirs < 0.1 ms)"


def report(plan: Plan, f: dict[str, Any]) -> None:
    print(
        f"load average {f['load']:.1f} at the start, {f['load_after']:.1f} at the end, on {os.cpu_count()} cores"
    )
    print(
        f"toolpipe serve: ready {f['serve_ready_ms']:.0f} ms after it starts (median of {plan.serve_samples})"
    )
    print(f"local runtime start-up, in this process: {f['startup_ms']:.0f} ms")
    peers = [name for name in PEER_NAMES if f"{name}_{plan.turns[0]}_ms" in f]
    loops = ["toolpipe", *peers]
    names = {"toolpipe": "toolpipe, local runtime", **PEER_NAMES}
    print(
        "N tool turns, one scripted server, medians of rounds side by side: "
        "total run · overhead per tool turn · CPU per tool turn, both above the bare openai loop"
    )
    for turns in plan.turns:
        print(f"  {turns} turns (bare openai loop {f[f'bare_{turns}_ms']:.0f} ms a run):")
        for name in loops:
            print(
                f"    {names[name]:<24} {f[f'{name}_{turns}_ms']:>6.0f} ms · "
                f"+{f[f'{name}_overhead_{turns}_ms']:.1f} ms/turn · +{f[f'{name}_cpu_{turns}_ms']:.1f} ms CPU/turn"
            )
        for name in peers:
            print(
                f"    toolpipe / {names[name]}: overhead "
                f"{_ratio(f[f'toolpipe_overhead_{turns}_ms'], f[f'{name}_overhead_{turns}_ms'])}, "
                f"CPU {_ratio(f[f'toolpipe_cpu_{turns}_ms'], f[f'{name}_cpu_{turns}_ms'])}"
            )
    for name in missing_peers():
        print(f"  {PEER_NAMES[name]}: not installed, skipped (pip install '.[bench]')")
    if len(plan.turns) > 1:
        low, high = min(plan.turns), max(plan.turns)
        ratio = f[f"toolpipe_overhead_{high}_ms"] / f[f"toolpipe_overhead_{low}_ms"]
        print(f"  toolpipe's overhead per turn, {high} turns / {low} turns: {ratio:.2f}x")
    print(
        f"start-up, a fresh interpreter to ready to run (import + set-up), median of {plan.startup_rounds} "
        "rounds side by side:"
    )
    boto3 = f["ready_boto3_ms"]
    print(
        f"    {'toolpipe LocalPipeline':<24} {f['ready_local_pipeline_ms']:>6.0f} ms (import "
        f"{f['ready_local_pipeline_import_ms']:.0f}, start {f['local_pipeline_start_ms']:.0f} ms, "
        f"CPU {f['local_pipeline_start_cpu_ms']:.0f} ms)"
    )
    for name in ("bare", *peers):
        if f"ready_{name}_ms" not in f:
            print(f"    {names.get(name, 'bare openai'):<24} not measured (--quick)")
            continue
        label = "bare openai" if name == "bare" else names[name]
        print(
            f"    {label:<24} {f[f'ready_{name}_ms']:>6.0f} ms · LocalPipeline "
            f"{f['ready_local_pipeline_ms'] / f[f'ready_{name}_ms']:.1f}x"
        )
    print(
        f"    (import boto3: {boto3:.0f} ms; LocalPipeline's start is "
        f"{f['local_pipeline_start_per_boto3']:.2f}x its CPU, the guard's figure)"
    )
    one, many = f["fan_out_1_ms"], f["fan_out_ms"]
    print(
        f"fan-out: {plan.fan_out} parallel {plan.tool_seconds:g}-second tools {many:.0f} ms, one {one:.0f} ms: "
        f"{f['fan_out_ratio']:.2f}x (the median of each round's ratio)"
    )
    print(f"idle runtime: {f['idle_cpu_percent']:.1f}% of a core")
    if "memory_kib_per_run" in f:
        print(
            f"memory a long-lived runtime keeps per {plan.memory_turns}-turn run: {f['memory_kib_per_run']:.0f} KiB "
            f"(resident, over {plan.memory_runs} runs)"
        )
    else:
        print("memory a long-lived runtime keeps per run: not measured (no /proc/self/statm)")
    print(json.dumps({k: round(v, 1 if k.endswith("_ms") else 3) for k, v in f.items()}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="every part once, small: seconds (make test)")
    parser.add_argument("--no-cold-start", action="store_true")
    parser.add_argument("--no-layers", action="store_true", help="cold start: code asset only, no pip")
    parser.add_argument("--no-cost", action="store_true", help="without the reference run's cost")
    args = parser.parse_args()
    plan = Plan.quick() if args.quick else Plan(repeats=args.repeats)
    if not args.no_cold_start:
        from benchmarks import coldstart

        coldstart.report(args.repeats, layers=not args.no_layers, quick=args.quick)
    report(plan, figures(plan))
    if not args.no_cost:
        from benchmarks import cost

        cost.report()


if __name__ == "__main__":
    main()
