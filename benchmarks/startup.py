"""Start-up in fresh interpreters: what a program pays before its first run, and the reference
it is divided by.

Each measure is one fresh `python -c` (its interpreter's own start not counted) that imports
what it needs, then sets up, and prints the wall and CPU seconds of each part. CPU time is the
process's, every thread's (`getrusage`): the local runtime starts threads. The measures:

- `boto3`: `import boto3`, the reference. A stable amount of the same kind of work (importing
  Python modules), so a ratio to it is about the code, not about how busy the machine is.
- `tool_worker`: the tool worker's handler import, with the environment the stack gives it.
- `local_pipeline`: `from toolpipe.testing import LocalPipeline`, then `LocalPipeline()`
  entered: what a project's test pays before its first run.
- `bare`, `agents`, `pydantic_ai`: the peers' loops (benchmarks/loops.py) from import to an
  agent ready to run.
"""

import os
import statistics
import subprocess
import sys
from dataclasses import dataclass

from benchmarks.coldstart import ROOT, function_env
from toolpipe.infra.cdk.functions import TOOL_WORKER

SAMPLE = """
import resource, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
w0, c0 = time.perf_counter(), cpu()
{imports}
w1, c1 = time.perf_counter(), cpu()
{setup}
w2, c2 = time.perf_counter(), cpu()
print(w1 - w0, c1 - c0, w2 - w1, c2 - c1, flush=True)
{teardown}
"""
URL = "http://127.0.0.1:9/v1"  # never called: nothing here runs a model
# name: (imports, set-up, tear-down)
MEASURES = {
    "boto3": ("import boto3", "", ""),
    "tool_worker": (f"import {TOOL_WORKER.module}", "", ""),
    "local_pipeline": (
        "from toolpipe.testing import LocalPipeline",
        "pipeline = LocalPipeline().__enter__()",
        "pipeline.__exit__(None, None, None)",
    ),
    "bare": ("from openai import OpenAI", f"OpenAI(base_url={URL!r}, api_key='x')", ""),
    "agents": (
        "from agents import Agent, OpenAIChatCompletionsModel, function_tool\nfrom openai import AsyncOpenAI",
        "def sum(a: float, b: float) -> float:\n    return a + b\n"
        f"Agent(name='bench', tools=[function_tool(sum)], model=OpenAIChatCompletionsModel("
        f"model='scripted', openai_client=AsyncOpenAI(base_url={URL!r}, api_key='x')))",
        "",
    ),
    "pydantic_ai": (
        "from pydantic_ai import Agent\nfrom pydantic_ai.models.openai import OpenAIChatModel\n"
        "from pydantic_ai.providers.openai import OpenAIProvider",
        f"agent = Agent(OpenAIChatModel('scripted', provider=OpenAIProvider(base_url={URL!r}, api_key='x')))\n"
        "@agent.tool_plain\ndef sum(a: float, b: float) -> float:\n    return a + b",
        "",
    ),
}


@dataclass(frozen=True)
class StartUp:
    """One measure's seconds: its imports and its set-up, wall and CPU."""

    import_wall: float
    import_cpu: float
    setup_wall: float
    setup_cpu: float

    @property
    def wall(self) -> float:
        return self.import_wall + self.setup_wall

    @property
    def cpu(self) -> float:
        return self.import_cpu + self.setup_cpu


def measure(name: str) -> StartUp:
    """One sample of `name` (a key of MEASURES) in a fresh interpreter."""
    imports, setup, teardown = MEASURES[name]
    env = {
        **function_env(tracing=False, spec=TOOL_WORKER if name == "tool_worker" else None),
        "POWERTOOLS_LOG_LEVEL": "ERROR",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    }
    if name == "local_pipeline":  # a project's test: no Lambda around it
        for lambda_only in ("LAMBDA_TASK_ROOT", "AWS_LAMBDA_FUNCTION_NAME"):
            env.pop(lambda_only)
    code = SAMPLE.format(imports=imports, setup=setup, teardown=teardown)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"start-up of {name} failed: {out.stderr.strip().splitlines()[-1]}")
    import_wall, import_cpu, setup_wall, setup_cpu = map(float, out.stdout.split()[:4])
    return StartUp(import_wall, import_cpu, setup_wall, setup_cpu)


def rounds(names: list[str], count: int) -> dict[str, list[StartUp]]:
    """`count` rounds of one sample of each name, side by side: a slow moment of a busy machine
    slows a whole round, and a ratio within the round keeps little of it."""
    samples: dict[str, list[StartUp]] = {name: [] for name in names}
    for _ in range(count):
        for name in names:
            samples[name].append(measure(name))
    return samples


def median_ratio(tops: list[float], bottoms: list[float]) -> float:
    """The median of each round's ratio."""
    return statistics.median(t / b for t, b in zip(tops, bottoms, strict=True))
