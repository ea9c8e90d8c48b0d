"""Prints figures for the local pipeline, its peers and the handlers' cold starts.

    make bench            # or: python -m benchmarks.pipeline --repeats 5

First, the functions' cold starts and bundle sizes (benchmarks/coldstart.py, which also runs
alone: `python -m benchmarks.coldstart`).

Everything runs in one process against one scripted OpenAI-compatible server on 127.0.0.1:
the bare `openai` client's loop (call the model, run the tool, append, again), the OpenAI
Agents SDK's run loop (`pip install '.[bench]'`; skipped when absent) and toolpipe's local
runtime, each driving the same N tool turns; then the fan-out, the memory a long-lived runtime
keeps per run, and the idle runtime's CPU. Last, what a reference run costs on AWS beside the
peer design's model (benchmarks/cost.py, which also runs alone: `python -m benchmarks.cost`). "Overhead per tool turn" is how much longer a
loop takes than the bare client's, divided by N: the median over rounds that run each loop
once, side by side (3 * `--repeats` rounds at 10 turns, `--repeats` / 2 at 50), so a slow
moment of a noisy machine slows all the loops of its round alike. Figures, not pass/fail:
compare them across changes on the same machine.
"""

import argparse
import asyncio
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
from typing import Any

MODEL = "scripted"
PROMPT = "Count up, one tool call a turn."
FAN_OUT = 10
TOOL_SECONDS = 1.0
MEMORY_RUNS = 100


# --- the scripted model: N turns of one `sum` call, or one turn of parallel waits ------------


def turns_responder(request: dict[str, Any]) -> Any:
    """Stateless, so every loop under test gets the same replies: the prompt says how many
    tool turns to make; each turn calls `sum`, then a plain answer ends the run."""
    from toolpipe.infra.local.scripted_model import Reply

    messages = request.get("messages", [])
    prompt = next(str(m.get("content")) for m in messages if m.get("role") == "user")
    wanted = int(prompt.rsplit(" ", 1)[-1]) if prompt.rsplit(" ", 1)[-1].isdigit() else 0
    done = sum(1 for m in messages if m.get("role") == "assistant")
    if prompt.startswith("wait"):
        if done:
            return Reply(content="waited")
        return Reply(tool_calls=[("wait_a_second", {"n": i}) for i in range(wanted)])
    if done < wanted:
        return Reply(tool_calls=[("sum", {"a": done, "b": 1})])
    return Reply(content=f"counted to {done}")


def _sum(a: float, b: float) -> float:
    return a + b


# --- the loops under test ---------------------------------------------------------------------


def bare_loop(base_url: str, turns: int) -> float:
    """The floor: the `openai` client alone, the tool run inline."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="scripted")
    spec = {
        "type": "function",
        "function": {
            "name": "sum",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    }
    started = time.perf_counter()
    messages: list[Any] = [{"role": "user", "content": f"{PROMPT} {turns}"}]
    for _ in range(turns + 2):
        reply = client.chat.completions.create(model=MODEL, messages=messages, tools=[spec])  # type: ignore[list-item]
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            break
        for call in message.tool_calls:
            args = json.loads(call.function.arguments)  # type: ignore[union-attr]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": str(_sum(**args))})
    client.close()
    return time.perf_counter() - started


def agents_sdk_loop(base_url: str, turns: int) -> float:
    """The OpenAI Agents SDK's run loop, on the same server, tracing off."""
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool  # type: ignore[untyped-decorator,unused-ignore]  # untyped when `.[bench]` is absent
    def sum(a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    async def run() -> float:
        client = AsyncOpenAI(base_url=base_url, api_key="scripted")
        agent = Agent(
            name="bench",
            instructions="Count.",
            tools=[sum],
            model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
        )
        started = time.perf_counter()
        await Runner.run(agent, f"{PROMPT} {turns}", max_turns=turns + 2)
        elapsed = time.perf_counter() - started
        await client.close()
        return elapsed

    return asyncio.run(run())


def _register_bench_agent() -> None:
    from assistant.agents import sum

    from toolpipe.shared.agents import AGENTS, Agent
    from toolpipe.shared.tools import tool

    @tool
    def wait_a_second(n: int) -> str:
        """Wait one second, as a slow API call would.

        Args:
            n: Which call this is.
        """
        time.sleep(TOOL_SECONDS)
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


def side_by_side(rounds: int, loops: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """Each loop's times over `rounds` rounds of one run each, after one warm-up round."""
    for measure in loops.values():
        measure()  # warm-up: imports, connections, caches
    times: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(rounds):
        for name, measure in loops.items():
            times[name].append(measure())
    return times


def figures(repeats: int) -> dict[str, Any]:
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    from toolpipe.infra.local.runtime import LocalRuntime
    from toolpipe.infra.local.scripted_model import ScriptedModelServer

    try:
        import agents  # noqa: F401

        have_agents = True
    except ImportError:
        have_agents = False
    _register_bench_agent()
    out: dict[str, Any] = {"serve_ready_ms": statistics.median(serve_ready_ms() for _ in range(3))}
    with ScriptedModelServer(turns_responder) as model:
        env = {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "scripted", "TOOLPIPE_MODEL": MODEL}
        started = time.perf_counter()
        with LocalRuntime(extra_env=env) as runtime:
            out["startup_ms"] = (time.perf_counter() - started) * 1000

            def toolpipe(prompt: str) -> float:
                t = time.perf_counter()
                status, body = runtime.api("POST", "/runs", {"prompt": prompt, "agent": "bench"})
                assert status == 202, body
                described = runtime.wait_for_execution(body["run_id"], timeout=60)
                elapsed = time.perf_counter() - t
                if described["status"] != "SUCCEEDED":
                    raise RuntimeError(
                        f"run {body['run_id']}: {runtime.api('GET', '/runs/' + body['run_id'])}"
                    )
                return elapsed

            for turns in (10, 50):
                # Rounds of one run of each loop, side by side: a slow second of this shared
                # machine then slows all three alike, and each overhead is the median of its
                # rounds' differences. Short runs get more rounds (a 10-turn run is ~0.2 s).
                rounds = 3 * repeats if turns == 10 else max(1, repeats // 2)
                loops: dict[str, Callable[[], float]] = {
                    "bare": lambda: bare_loop(model.base_url, turns),  # noqa: B023
                    "toolpipe": lambda: toolpipe(f"{PROMPT} {turns}"),  # noqa: B023
                }
                if have_agents:
                    loops["agents"] = lambda: agents_sdk_loop(model.base_url, turns)  # noqa: B023
                times = side_by_side(rounds, loops)
                out[f"bare_{turns}_ms"] = statistics.median(times["bare"]) * 1000
                for name in loops.keys() - {"bare"}:
                    out[f"{name}_{turns}_ms"] = statistics.median(times[name]) * 1000
                    extra = [(t - b) / turns for t, b in zip(times[name], times["bare"], strict=True)]
                    out[f"{name}_overhead_{turns}_ms"] = statistics.median(extra) * 1000

            # Side by side too, and at least three rounds: one slow second moves a pair.
            fan = side_by_side(
                max(3, repeats // 2),
                {"one": lambda: toolpipe("wait 1"), "many": lambda: toolpipe(f"wait {FAN_OUT}")},
            )
            out["fan_out_1_ms"] = statistics.median(fan["one"]) * 1000
            out[f"fan_out_{FAN_OUT}_ms"] = statistics.median(fan["many"]) * 1000
            out["fan_out_ratio"] = statistics.median(
                m / o for m, o in zip(fan["many"], fan["one"], strict=True)
            )

            # What a long-lived runtime keeps per run: its items, its execution and its history
            # events stay in memory, as they stay in AWS. Resident memory, so the allocator's own
            # growth counts too: a figure to compare across changes, not a census.
            before = _rss_kib()
            if before is not None:
                for _ in range(MEMORY_RUNS):
                    toolpipe(f"{PROMPT} 10")
                after = _rss_kib()
                assert after is not None
                out["memory_kib_per_run"] = (after - before) / MEMORY_RUNS

            idle = threading.Event()
            cpu, wall = time.process_time(), time.perf_counter()
            idle.wait(3.0)  # the runtime running, nothing to do
            out["idle_cpu_percent"] = (time.process_time() - cpu) / (time.perf_counter() - wall) * 100
    return out


def report(f: dict[str, Any]) -> None:
    print(f"toolpipe serve: ready {f['serve_ready_ms']:.0f} ms after it starts (median of 3)")
    print(f"local runtime start-up: {f['startup_ms']:.0f} ms")
    print(
        "N tool turns, one scripted server, medians (ms): total run · overhead per tool turn above bare openai"
    )
    for turns in (10, 50):
        line = f"  {turns:>2} turns: bare openai {f[f'bare_{turns}_ms']:.0f}"
        line += (
            f" · toolpipe {f[f'toolpipe_{turns}_ms']:.0f} (+{f[f'toolpipe_overhead_{turns}_ms']:.1f}/turn)"
        )
        if f"agents_{turns}_ms" in f:
            line += (
                f" · Agents SDK {f[f'agents_{turns}_ms']:.0f} (+{f[f'agents_overhead_{turns}_ms']:.1f}/turn)"
            )
        print(line)
    ratio = f["toolpipe_overhead_50_ms"] / f["toolpipe_overhead_10_ms"]
    print(f"  overhead per turn, 50 turns / 10 turns: toolpipe {ratio:.2f}x", end="")
    if "agents_overhead_10_ms" in f:
        print(f" · Agents SDK {f['agents_overhead_50_ms'] / f['agents_overhead_10_ms']:.2f}x")
    else:
        print(" · Agents SDK not installed (pip install '.[bench]')")
    one, many = f["fan_out_1_ms"], f[f"fan_out_{FAN_OUT}_ms"]
    print(
        f"fan-out: {FAN_OUT} parallel {TOOL_SECONDS:.0f}-second tools {many:.0f} ms, one {one:.0f} ms: "
        f"{f['fan_out_ratio']:.2f}x (the median of each round's ratio)"
    )
    print(f"idle runtime: {f['idle_cpu_percent']:.1f}% of a core")
    if "memory_kib_per_run" in f:
        print(
            f"memory a long-lived runtime keeps per 10-turn run: {f['memory_kib_per_run']:.0f} KiB "
            f"(resident, over {MEMORY_RUNS} runs)"
        )
    else:
        print("memory a long-lived runtime keeps per run: not measured (no /proc/self/statm)")
    print(json.dumps({k: round(v, 3 if k == "fan_out_ratio" else 1) for k, v in f.items()}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-cold-start", action="store_true")
    parser.add_argument("--no-layers", action="store_true", help="cold start: code asset only, no pip")
    args = parser.parse_args()
    if not args.no_cold_start:
        from benchmarks import coldstart

        coldstart.report(args.repeats, layers=not args.no_layers)
    report(figures(args.repeats))
    from benchmarks import cost

    cost.report()


if __name__ == "__main__":
    main()
