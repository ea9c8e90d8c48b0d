"""Prints figures for the local pipeline and the handlers' cold starts.

    make bench            # or: python benchmarks/pipeline.py --runs 20

Figures, not pass/fail: compare them across changes on the same machine.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HANDLERS = ["functions.orchestrator.handler", "functions.tool_worker.handler", "functions.api.handler"]
COLD_START = """
import resource, sys, time
t = time.perf_counter()
import {module}
print(round((time.perf_counter() - t) * 1000), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


def cold_starts() -> None:
    env = {
        **os.environ,
        "TABLE_NAME": "t",
        "BUCKET_NAME": "b",
        "STATE_MACHINE_ARN": "arn",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    print("cold start: import time and peak RSS of each handler module (fresh interpreter, warm disk cache)")
    for module in HANDLERS:
        samples = []
        for _ in range(3):
            out = subprocess.run(
                [sys.executable, "-c", COLD_START.format(module=module)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            samples.append((int(out[0]), int(out[1])))
        ms = statistics.median(s[0] for s in samples)
        rss = max(s[1] for s in samples)
        print(f"  {module:<34} {ms:>5.0f} ms  {rss:>4d} MB")


def pipeline(runs: int) -> None:
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    from infra.local.runtime import LocalRuntime
    from infra.local.scripted_model import DemoResponder, ScriptedModelServer

    with ScriptedModelServer(DemoResponder()) as model:
        env = {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "scripted"}
        started = time.perf_counter()
        with LocalRuntime(extra_env=env) as runtime:
            startup = time.perf_counter() - started
            latencies, events = [], []
            for prompt in [
                "What is the square root of 475695037565?",
                "What is 2+3 and the square root of 16?",
            ] * (runs // 2):
                t = time.perf_counter()
                _, body = runtime.api("POST", "/runs", {"prompt": prompt})
                runtime.wait_for_execution(body["run_id"], timeout=60)
                latencies.append((time.perf_counter() - t) * 1000)
                events.append(len(runtime.execution_events(body["run_id"])))
    latencies.sort()
    print(f"local runtime start-up: {startup * 1000:.0f} ms")
    print(
        f"runs: {len(latencies)} (two model turns each, one or two tool calls) · "
        f"median {statistics.median(latencies):.0f} ms · p90 {latencies[int(len(latencies) * 0.9) - 1]:.0f} ms · "
        f"max {latencies[-1]:.0f} ms"
    )
    print(f"Step Functions history events per run: {sorted(set(events))} (limit 25,000)")
    print(
        json.dumps(
            {"startup_ms": round(startup * 1000), "median_run_ms": round(statistics.median(latencies))}
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    cold_starts()
    pipeline(args.runs)


if __name__ == "__main__":
    main()
