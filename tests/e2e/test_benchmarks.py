"""The benchmarks run (issue 31): each one's quick mode in a fresh process, the benchmark's runs
free of the per-caller quotas, and the start-up guard against benchmarks/baseline.json.

Nothing ran the benchmarks, so two broke unseen (the quotas refused the pipeline's own runs; the
cold start named API builders that had moved). Here each runs as a user runs it and must print
its figures. Without the `bench` extra (CI installs `.[dev]`), the peers' loops are skipped with
a note, not a failure."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import guard
from benchmarks.coldstart import FIRST_CALL, compile_ms, function_env
from benchmarks.cost import RETRY_AFTERS
from benchmarks.loops import PEER_NAMES, missing_peers, turns_responder
from benchmarks.runtime import bench_runtime
from toolpipe.infra.cdk.functions import API, FUNCTIONS, TOOL_RUNNER, TOOL_WORKER
from toolpipe.infra.local import template
from toolpipe.infra.local.scripted_model import ScriptedModelServer
from toolpipe.shared.runs.quota import RunQuota
from toolpipe.shared.settings import QuotaSettings

ROOT = Path(__file__).resolve().parents[2]
# The variables libraries read at import: Powertools', pydantic's.
LIBRARY_SWITCHES = ("POWERTOOLS_", "PYDANTIC_")
QUICK = {
    "coldstart": ["benchmarks.coldstart", "--quick"],
    "pipeline": ["benchmarks.pipeline", "--quick", "--no-cold-start", "--no-cost"],
    "cost": ["benchmarks.cost"],
    "calls": ["benchmarks.calls", "--quick"],
    "governor": ["benchmarks.governor", "--quick"],
    "instructions": ["benchmarks.instructions", "--quick"],
    "instructions-runtimes": ["benchmarks.instructions", "--quick", "--runtimes"],
}


def _run_all_quick() -> dict[str, subprocess.CompletedProcess[str]]:
    """Every benchmark's quick mode, at once (each is mostly one core's work)."""
    env = {**os.environ, "POWERTOOLS_LOG_LEVEL": "ERROR"}
    running = {
        name: subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in QUICK.items()
    }
    done = {}
    for name, process in running.items():
        out, err = process.communicate(timeout=180)
        done[name] = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    return done


def test_every_benchmark_runs_in_its_quick_mode_and_prints_its_figures() -> None:
    started = time.perf_counter()
    results = _run_all_quick()
    for name, result in results.items():
        assert result.returncode == 0, f"{name}: {result.stderr[-2000:]}"

    coldstart = results["coldstart"].stdout
    for name in FUNCTIONS:  # each function's import and first call, in ms
        [row] = [line for line in coldstart.splitlines() if line.split()[:1] == [name] and "ms (" in line]
        assert row.split()[1].isdigit(), row

    pipeline = results["pipeline"].stdout
    [figures_line] = [line for line in pipeline.splitlines() if line.startswith("{")]
    figures = json.loads(figures_line)
    for key in ("startup_ms", "toolpipe_overhead_3_ms", "toolpipe_cpu_3_ms", "local_pipeline_start_ms"):
        assert figures[key] > 0, key
    for peer, label in PEER_NAMES.items():
        if peer in missing_peers():
            assert f"{label}: not installed, skipped (pip install '.[bench]')" in pipeline
        else:
            assert f"{peer}_cpu_3_ms" in figures and f"toolpipe / {label}: overhead" in pipeline

    calls = results["calls"].stdout
    for way in ("in process", "forked (deployed)", "fresh template"):
        [row] = [line for line in calls.splitlines() if line.strip().startswith(way)]
        assert "median" in row and "p95" in row, row
    assert "template memory: forked" in calls
    for way in ("fresh interpreter", "forked (fork server)"):  # a local template's start
        [row] = [line for line in calls.splitlines() if line.strip().startswith(way)]
        assert "ms to ready, its CPU" in row, row
    assert "x less CPU; the server's own start" in calls

    cost = results["cost"].stdout
    assert "what a reference run costs on AWS" in cost and "infrastructure" in cost
    # A governed wait beside a retried call's sleeping Lambda, for each Retry-After.
    assert "what waiting for the model's rate limit costs on AWS" in cost
    assert "a governed wait adds 3 state transitions" in cost
    rows = [line.split() for line in cost.splitlines()]
    for seconds in RETRY_AFTERS:
        [row] = [r for r in rows if r[:2] == [str(seconds), "s"]]
        assert float(row[2]) > 0 and float(row[3]) > 0, row

    governor = results["governor"].stdout
    [governed_line] = [line for line in governor.splitlines() if line.startswith("{")]
    governed = json.loads(governed_line)
    # Every run succeeded, the model steps never slept through a wait, and the waits were the
    # state machine's: the figures the full mode measures at 60 a minute.
    assert governed["runs_not_succeeded"] == 0 and governed["executions_not_succeeded"] == 0
    assert governed["state_machine_waits"] > 0
    assert governed["requests_served"] == governed["runs"] * governed["model_calls_per_run"]
    # The workload ran under the stand-in for valgrind, once with one run and once with two:
    # a million a run and half a million for the start, as the counting works them out.
    instructions = results["instructions"].stdout
    assert f"{ROOT}: a run 1.0 M, start-up 0.5 M" in instructions, instructions
    # And with each run in a runtime of its own (each workload's runs all succeeded, or it failed).
    per_runtime = results["instructions-runtimes"].stdout
    assert "each in a new runtime" in per_runtime, per_runtime
    assert f"{ROOT}: a run 1.0 M, start-up 0.8 M" in per_runtime, per_runtime  # the stand-in saw the flag
    print(f"the benchmarks' quick modes took {time.perf_counter() - started:.1f} s")


def test_the_cold_start_names_a_first_call_for_every_function() -> None:
    assert set(FIRST_CALL) == set(FUNCTIONS)


def test_the_compile_figure_counts_installed_packages_as_layers_where_the_venv_is_in_the_repository() -> None:
    """`make install` puts .venv inside the repository: its packages are the layers' (Powertools,
    pydantic...), not our code, which is a small part of what the worker compiles."""
    ours_ms, layers_ms = compile_ms(TOOL_WORKER, ["boto3", "botocore"], repeats=1)
    assert layers_ms > 2 * ours_ms > 0


def test_the_cold_start_figures_have_the_library_switches_the_stack_gives_each_function() -> None:
    """A switch a library reads at import changes a cold start (pydantic's plugins off: ~15 ms of
    the worker's): each function's import is measured with the ones the stack sets on it, and no
    other (the tool runner, where tools run, keeps pydantic's plugins)."""
    deployed = template.load(template.configured_path())
    for spec in FUNCTIONS.values():
        variables = deployed.function(spec)[1]["Environment"]["Variables"]
        switches = {name: value for name, value in variables.items() if name.startswith(LIBRARY_SWITCHES)}
        measured = function_env(tracing=False, spec=spec)
        assert {
            name: measured[name] for name in measured if name.startswith(LIBRARY_SWITCHES)
        } == switches | {
            "POWERTOOLS_TRACE_DISABLED": "true"  # the stack sets it where tracing is off, as here
        }, spec.name
    assert "PYDANTIC_DISABLE_PLUGINS" not in function_env(tracing=False, spec=TOOL_RUNNER)
    assert function_env(tracing=False, spec=TOOL_WORKER)["PYDANTIC_DISABLE_PLUGINS"] == "__all__"


def test_the_benchmarks_runs_are_nobodys_quota() -> None:
    """The API function of the benchmark's runtime has both quotas off, as a deployer turns them
    off (0), where the stack's default holds them on for every user. (Its environment is what
    the handler builds its quota from; 61 runs a minute, the proof by numbers, cost 30 s.)"""
    api_env = template.load(template.configured_path()).function(API)[1]["Environment"]["Variables"]
    default = QuotaSettings.from_env(api_env)
    assert RunQuota(default).enabled and default.starts_per_minute == 60 and default.running == 20

    with ScriptedModelServer(turns_responder) as model, bench_runtime(model.base_url) as runtime:
        quota = QuotaSettings.from_env(runtime.functions[API.name].environment)
        assert not RunQuota(quota).enabled
        status, body = runtime.api("POST", "/runs", {"input": "Count up. 0", "agent": "tester"})
        assert status == 202, body
        assert runtime.wait_for_execution(body["run_id"], timeout=60)["status"] == "SUCCEEDED"


def test_the_start_up_guard_holds_against_the_baseline() -> None:
    """LocalPipeline's start-up and the tool worker's import, as ratios to `import boto3` in the
    same rounds, within 1.5x the committed baseline's."""
    results = guard.verdicts(guard.measure(rounds=3), guard.baseline_ratios())
    assert [v.name for v in results] == list(guard.GUARDED)
    assert all(v.ok for v in results), "\n".join(v.line() for v in results)
