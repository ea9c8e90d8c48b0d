"""Cold start of each Lambda function: how long its handler takes to import, and what it deploys.

    python -m benchmarks.coldstart [--repeats 5] [--no-layers]     # also the first part of `make bench`
    python -m benchmarks.coldstart --quick     # seconds: one import and first call a function

Import time: a fresh interpreter per sample (`python -c`), the wall-clock time of
`import <handler module>` alone (interpreter start-up excluded), with the environment the stack
gives the function and `LAMBDA_TASK_ROOT` set as on Lambda; the median of `--repeats` samples,
with the CPU time of the same import beside it (this machine is shared: wall time moves with
the load, CPU time much less). Twice: with tracing off (`POWERTOOLS_TRACE_DISABLED=true`), the
figure the goals are about, and on, where X-Ray is loaded. "First call" is what the handler
builds once, at its first invocation, after the import: its boto3 clients, and for the
orchestrator the `openai` client it imports then.

Bundle: what the function deploys, unzipped (Lambda's 250 MB limit counts it so): the code
asset (toolpipe's runtime and the app's package, as infra/cdk/app_code.py stages it) plus its layers, installed
with the same pip command the stack's bundling runs (infra/cdk/bundling.py), for the Lambda
platform, cached under build/bench-layers/. Without PyPI, the layers are reported as not
measured.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from toolpipe.infra.cdk.functions import FUNCTIONS, ORCHESTRATOR, PLUGINS_OFF, TOOL_RUNNER, FunctionSpec

ROOT = Path(__file__).resolve().parents[1]
LAYER_CACHE = ROOT / "build" / "bench-layers"
# Issue 10's goals, on this machine, tracing off; the API and triggers have none (measured too).
GOALS_MS = {"tool_worker": 350, "orchestrator": 700}
# What each handler builds once at its first call, by function name: statements on the imported
# `handler` (the API's services are the cached properties of its `services`; the others' are
# cached builders). Every function of FUNCTIONS has an entry: a benchmark that names a builder
# the handler no longer has fails, so it cannot measure less than it says.
FIRST_CALL = {
    "api": ("handler.services.starter", "handler.services.canceller", "handler.services.reader"),
    "orchestrator": ("handler.service()",),
    "tool_worker": ("handler.service()",),
    "tool_runner": ("handler.s3()",),
    "triggers": ("handler.service()",),
}
# One sample: wall and CPU ms of the import, then of the first call's builders, and peak RSS.
SAMPLE = """
import resource, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
wall, used = time.perf_counter(), cpu()
import {module} as handler
imported, import_cpu = time.perf_counter(), cpu()
{first_call}
print((imported - wall) * 1000, (import_cpu - used) * 1000, (time.perf_counter() - imported) * 1000,
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


# Compiling, in one fresh interpreter, every source file the import loaded from our code and
# from the layers (not the runtime's own packages): what a cold start on Lambda adds today,
# where no bytecode for its Python ships (the build machine's Python is another version).
COMPILE = """
import os, sys, time
import {module}
site = next(p for p in sys.path if p.endswith("site-packages"))
provided, ours, layers = {provided!r}, 0.0, 0.0
for m in list(sys.modules.values()):
    path = getattr(m, "__file__", None) or ""
    if not path.endswith(".py"):
        continue
    # A layer's package first: the .venv may well be inside the repository.
    layer = path.startswith(site + os.sep)
    mine = not layer and path.startswith({root!r} + os.sep)
    if not mine and (not layer or path[len(site) + 1 :].split("/")[0].split(".")[0] in provided):
        continue
    with open(path, "rb") as f:
        source = f.read()
    started = time.process_time()
    compile(source, path, "exec")
    spent = time.process_time() - started
    ours, layers = (ours + spent, layers) if mine else (ours, layers + spent)
print(ours * 1000, layers * 1000)
"""


@dataclass(frozen=True)
class ImportTime:
    wall_ms: float
    cpu_ms: float
    first_call_ms: float
    rss_mb: int


def function_env(tracing: bool, spec: FunctionSpec | None = None) -> dict[str, str]:
    """The variables the stack sets on `spec`'s function (values are placeholders: nothing here
    calls AWS or a model), as on Lambda; None: those every function has (a peer's loop or a
    project's test, measured beside them, gets no switch of the stack's)."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        "LAMBDA_TASK_ROOT": str(ROOT),
        "AWS_LAMBDA_FUNCTION_NAME": "toolpipe-bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "TABLE_NAME": "toolpipe",
        "BUCKET_NAME": "toolpipe",
        "STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:toolpipe",
        "POWERTOOLS_SERVICE_NAME": "toolpipe",
        # The orchestrator's first call builds its model client: a key and a local URL, no secret read.
        "OPENAI_API_KEY": "bench",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    }
    if not tracing:
        env["POWERTOOLS_TRACE_DISABLED"] = "true"
    # Which the stack sets on the pipeline's own functions, and not on the tool runners.
    return env if spec is None or spec.module == TOOL_RUNNER.module else env | PLUGINS_OFF


def measure_import(spec: FunctionSpec, *, tracing: bool, repeats: int) -> ImportTime:
    code = SAMPLE.format(module=spec.module, first_call="\n".join(FIRST_CALL[spec.name]))
    samples = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=function_env(tracing, spec),
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"importing {spec.module} failed: {out.stderr.strip().splitlines()[-1]}")
        wall, cpu, first_call, rss = out.stdout.split()
        samples.append(ImportTime(float(wall), float(cpu), float(first_call), int(rss)))
    return ImportTime(
        wall_ms=statistics.median(s.wall_ms for s in samples),
        cpu_ms=statistics.median(s.cpu_ms for s in samples),
        first_call_ms=statistics.median(s.first_call_ms for s in samples),
        rss_mb=max(s.rss_mb for s in samples),
    )


def compile_ms(spec: FunctionSpec, provided: list[str], repeats: int) -> tuple[float, float]:
    """CPU ms to compile the sources the import loads: our code's, the layers'."""
    code = COMPILE.format(module=spec.module, provided=provided, root=str(ROOT))
    samples = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=function_env(False, spec),
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise RuntimeError(f"importing {spec.module} failed: {out.stderr.strip().splitlines()[-1]}")
        ours, layers = out.stdout.split()
        samples.append((float(ours), float(layers)))
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def code_asset_bytes() -> int:
    """The functions' one code asset, staged as the stack stages it for this repository's app."""
    from toolpipe.infra.cdk.app_code import stage_code
    from toolpipe.shared.app_ref import find_app

    app = find_app()
    if app is None:
        raise SystemExit("no app: run the benchmark from the repository ([tool.toolpipe] app)")
    return tree_bytes(stage_code(app.module))


def layer_bytes(name: str) -> int:
    """One layer as the stack builds it, installed once into the cache (pip needs PyPI)."""
    from toolpipe.infra.cdk.bundling import LAYERS, install_layer, layer_hash  # imports aws_cdk: only here

    layer = LAYERS[name]
    layer_dir = LAYER_CACHE / layer_hash([layer.lock], layer.skip)
    if not (layer_dir / "complete").exists():
        LAYER_CACHE.mkdir(parents=True, exist_ok=True)
        # Built aside and renamed when complete: an interrupted pip never leaves a half layer cached.
        building = Path(tempfile.mkdtemp(dir=LAYER_CACHE, prefix="building-"))
        try:
            install_layer([layer.lock], layer.skip, building)
            (building / "complete").touch()
            shutil.rmtree(layer_dir, ignore_errors=True)
            building.rename(layer_dir)
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return tree_bytes(layer_dir / "python")


def runtime_provided() -> list[str]:
    """What the Lambda runtime provides and the layers leave out (boto3 and what it needs)."""
    from toolpipe.infra.cdk.bundling import RUNTIME_PROVIDED  # imports aws_cdk: only here

    return RUNTIME_PROVIDED


def layers_of(spec: FunctionSpec) -> list[str]:
    # Every function gets the dependencies; only the orchestrator the openai layer
    # (infra/cdk/constructs/functions.py; pinned by tests/infra/test_stack.py).
    return ["Dependencies", "ModelClient"] if spec is ORCHESTRATOR else ["Dependencies"]


def _wall_cpu(t: ImportTime) -> str:
    return f"{t.wall_ms:>7.0f} ms ({t.cpu_ms:>4.0f})"


def mb(n: int) -> str:
    return f"{n / 1_000_000:.1f} MB"


def load_average() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def report(repeats: int, layers: bool, quick: bool = False) -> None:
    """Prints the figures. `quick`: one sample of each import and its first call, tracing off,
    and the code asset; no compile figures (they import the CDK) and no layers (pip)."""
    if quick:
        repeats, layers = 1, False
    print(
        f"cold start: import of each handler in a fresh interpreter, median of {repeats} "
        f"(wall ms, CPU ms in brackets; load average {load_average()} on {os.cpu_count()} cores)"
    )
    print(
        f"  {'function':<13} {'tracing off':>18}  {'goal':<13} {'tracing on':>18}  {'first call':>10}  peak RSS"
    )
    for spec in FUNCTIONS.values():
        off = measure_import(spec, tracing=False, repeats=repeats)
        on_text = "not measured" if quick else _wall_cpu(measure_import(spec, tracing=True, repeats=repeats))
        goal = GOALS_MS.get(spec.name)
        verdict = "" if goal is None else f"<= {goal} " + ("ok" if off.wall_ms <= goal else "MISSED")
        print(
            f"  {spec.name:<13} {_wall_cpu(off)}  {verdict:<13} "
            f"{on_text:>18}  {off.first_call_ms:>7.0f} ms  {off.rss_mb} MB"
        )
    print(f"  load average after: {load_average()}")

    if quick:
        print("compiling the sources each import loads: not measured (--quick)")
    else:
        provided = runtime_provided()
        print(
            "compiling the sources each import loads (CPU ms, median): what Lambda adds to the import "
            "above, as no bytecode for its Python ships"
        )
        for spec in FUNCTIONS.values():
            ours_ms, layers_ms = compile_ms(spec, provided, repeats)
            print(
                f"  {spec.name:<13} our code {ours_ms:>4.0f} ms + layers {layers_ms:>4.0f} ms = {ours_ms + layers_ms:>4.0f} ms"
            )

    code = code_asset_bytes()
    print("bundle: what each function deploys, unzipped: code asset + layers")
    sizes: dict[str, int | None] = {}
    if not layers:
        print("  layers not measured (--no-layers)")
    else:
        for name in ("Dependencies", "ModelClient"):
            try:
                sizes[name] = layer_bytes(name)
            except (subprocess.CalledProcessError, OSError) as e:
                print(f"  layer {name}: not measured ({type(e).__name__}: pip could not build it here)")
                sizes[name] = None
    for spec in FUNCTIONS.values():
        parts = [f"code {mb(code)}"]
        total: int | None = code
        for name in layers_of(spec):
            size = sizes.get(name)
            parts.append(f"{name} {mb(size) if size is not None else 'not measured'}")
            total = None if size is None or total is None else total + size
        print(f"  {spec.name:<13} {' + '.join(parts)}" + ("" if total is None else f" = {mb(total)}"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=5, help="fresh interpreters per figure (default 5)")
    parser.add_argument("--no-layers", action="store_true", help="code asset only: no pip, no network")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one sample, tracing off, no compile or layers (make test runs it)",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    report(args.repeats, layers=not args.no_layers, quick=args.quick)


if __name__ == "__main__":
    main()
