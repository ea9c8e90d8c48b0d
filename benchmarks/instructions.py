"""The instructions a local run costs, counted by valgrind's callgrind: a figure this shared
machine's load does not move (two identical counts side by side: 0.01% apart), so a cut of 1%
shows where CPU time moves ±10% from one minute to the next (docs/benchmarks.md, "Counting
instructions").

    python -m benchmarks.instructions                       # this checkout
    python -m benchmarks.instructions --against ../before   # and another, side by side

Each checkout's workload (a local runtime, then N runs of `--turns` tool turns against the
scripted model, the pipeline benchmark's agent and tool) runs under callgrind twice, with N = 1
and N = `--runs`: a run's count is their difference over `--runs` - 1, which leaves the start-up
out, and the start-up is what N = 1 counted less one run. The checkouts' processes run at the
same time, so whatever the machine does meanwhile touches both alike (the counts drift ~1%
between hours, with how long the threads wait).

With `--runtimes`, each run is in a runtime of its own (started, one run, stopped): a "run" is
then what each test that starts a `LocalPipeline` pays, and the start-up the process's imports.

`--workload` runs the workload alone, without valgrind (what valgrind runs). `--quick`, in
`make test`, runs the counting with 3-turn runs under a stand-in for valgrind (callgrind would
take minutes) that counts 1 M a run and 0.5 M for the start, so the workload and the counting's
arithmetic cannot rot unseen; it skips the warm-up run, which only real counting needs.
Without `--quick`, valgrind must be installed (`apt-get install valgrind`).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# What callgrind prints at the end: "==123== Collected : 9200273298".
_COLLECTED = re.compile(r"Collected : (\d+)")


def workload(runs: int, turns: int, runtimes: bool = False) -> None:
    """A local runtime, then `runs` runs of `turns` tool turns each, all succeeded; with
    `runtimes`, each run in a new runtime."""
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    from benchmarks.loops import prompt, turns_responder
    from benchmarks.pipeline import _register_bench_agent
    from benchmarks.runtime import bench_runtime
    from toolpipe.infra.local.scripted_model import ScriptedModelServer

    def run(runtime: Any) -> None:
        status, body = runtime.api("POST", "/runs", {"prompt": prompt(turns), "agent": "bench"})
        assert status == 202, body
        described = runtime.wait_for_execution(body["run_id"], timeout=600)
        assert described["status"] == "SUCCEEDED", described

    _register_bench_agent(0.0)
    with ScriptedModelServer(turns_responder) as model:
        if runtimes:
            for _ in range(runs):
                with bench_runtime(model.base_url) as runtime:
                    run(runtime)
            return
        with bench_runtime(model.base_url) as runtime:
            for _ in range(runs):
                run(runtime)


def _workload_command(runs: int, turns: int, runtimes: bool) -> list[str]:
    return [
        sys.executable,
        # This file, run as a script: its `workload` imports the checkout's own benchmarks and
        # toolpipe (an older checkout has no `benchmarks.instructions`).
        str(Path(__file__).resolve()),
        "--workload",
        "--runs",
        str(runs),
        "--turns",
        str(turns),
        *(["--runtimes"] if runtimes else []),
    ]


def _run(command: list[str], root: Path) -> subprocess.CompletedProcess[str]:
    # The checkout's own code first: its benchmarks and its toolpipe, not this one's.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, check=False)


def warm(root: Path) -> None:
    """One short run of `root`'s workload, not counted: what it imports is compiled to bytecode
    once, before counting. A checkout fresh from `git worktree add` (and packages uv installed,
    which it leaves uncompiled) would otherwise compile them in its first counted process alone:
    ~1,500 M instructions once, which the difference of the two counts gives to the start-up and
    takes from a run (a run 1,134 M where it was 1,767 M once both were compiled)."""
    done = _run(_workload_command(1, 1, False), root)
    if done.returncode != 0:
        raise RuntimeError(f"{root}: the workload failed ({done.returncode}): {done.stderr[-1500:]}")


def counted(valgrind: str, root: Path, runs: int, turns: int, runtimes: bool = False) -> int:
    """The instructions of `root`'s workload, as callgrind counts them."""
    command = [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    done = _run([*command, *_workload_command(runs, turns, runtimes)], root)
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{root}: the counted workload failed ({done.returncode}): {done.stderr[-1500:]}")
    return int(found.group(1))


@dataclass(frozen=True)
class Counts:
    """One checkout's counts: a run's and the start-up's, in instructions."""

    root: Path
    per_run: float
    startup: float


def measure(
    valgrind: str, roots: list[Path], runs: int, turns: int, runtimes: bool = False, warmed: bool = True
) -> list[Counts]:
    """Each checkout warmed (unless not `warmed`), then counted with N = 1, all at once, then with
    N = `runs`, all at once."""
    with ThreadPoolExecutor(max_workers=len(roots)) as pool:
        if warmed:
            list(pool.map(warm, roots))
        one = list(pool.map(lambda root: counted(valgrind, root, 1, turns, runtimes), roots))
        many = list(pool.map(lambda root: counted(valgrind, root, runs, turns, runtimes), roots))
    out = []
    for root, first, last in zip(roots, one, many, strict=True):
        per_run = (last - first) / (runs - 1)
        out.append(Counts(root, per_run, first - per_run))
    return out


def report(counts: list[Counts], runs: int, turns: int, runtimes: bool = False) -> None:
    each = ", each in a new runtime" if runtimes else ""
    print(f"instructions (callgrind), N = 1 and N = {runs} runs of {turns} tool turns{each}, side by side:")
    for c in counts:
        print(f"  {c.root}: a run {c.per_run / 1e6:,.1f} M, start-up {c.startup / 1e6:,.1f} M")
    if len(counts) == 2:
        now, before = counts
        print(
            f"  this checkout / the other: a run {now.per_run / before.per_run:.3f}x, "
            f"start-up {now.startup / before.startup:.3f}x"
        )


def _stand_in(folder: Path) -> str:
    """An executable that runs what valgrind would and prints, as callgrind prints its count,
    a million for each run the workload made and half a million for its start, three quarters
    with `--runtimes` (so the arithmetic shows, and that the flag was passed on)."""
    path = folder / "valgrind"
    path.write_text(
        "#!/bin/sh\n"
        'while [ "${1#--}" != "$1" ]; do shift; done\n'
        '"$@" || exit $?\n'
        # A quarter of a million more for the start with `--runtimes`: the flag reached the workload.
        'runs=1; start=500000; while [ $# -gt 0 ]; do [ "$1" = --runs ] && runs=$2; '
        '[ "$1" = --runtimes ] && start=750000; shift; done\n'
        'echo "==$$== Collected : $((runs * 1000000 + start))" >&2\n'
    )
    path.chmod(0o755)
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", type=Path, help="another checkout, counted side by side")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument(
        "--runtimes", action="store_true", help="each run in a new runtime (what a test pays)"
    )
    parser.add_argument("--workload", action="store_true", help="the workload alone, without valgrind")
    parser.add_argument(
        "--quick", action="store_true", help="make test's: seconds, under a stand-in for valgrind"
    )
    options = parser.parse_args()
    if options.workload:
        workload(options.runs, options.turns, options.runtimes)
        return
    runs, turns = (2, 3) if options.quick else (options.runs, options.turns)
    if runs < 2:
        parser.error("--runs must be 2 or more: a run's count is the difference from one run")
    roots = [ROOT, *([options.against.resolve()] if options.against else [])]
    if options.quick:
        with tempfile.TemporaryDirectory() as folder:
            print(
                "quick: a stand-in for valgrind counts 1 M a run and 0.5 M for the start (0.75 M with --runtimes)"
            )
            # Not warmed: the stand-in counts no instructions, so compiling first changes nothing
            # it prints (two workload processes fewer in `make test`).
            counts = measure(_stand_in(Path(folder)), roots, runs, turns, options.runtimes, warmed=False)
            report(counts, runs, turns, options.runtimes)
        return
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        sys.exit("toolpipe: error: valgrind is not installed (apt-get install valgrind)")
    report(measure(valgrind, roots, runs, turns, options.runtimes), runs, turns, options.runtimes)


if __name__ == "__main__":
    main()
