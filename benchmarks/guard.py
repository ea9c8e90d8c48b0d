"""Fails when `LocalPipeline`'s start-up or the tool worker's cold import regresses by more than
half, against the baseline in benchmarks/baseline.json.

    python -m benchmarks.guard [--rounds 3]     # make test runs it (tests/unit/test_benchmarks.py)

This machine is shared and its load moves every wall time, so nothing here is compared in
milliseconds: each figure is a ratio to `import boto3` measured in the same round (a fresh
interpreter each, benchmarks/startup.py), the median over the rounds, compared with the
baseline's ratio x TOLERANCE. The ratios are of CPU time, which the load moves much less than
wall time (a busy machine makes a process wait, not work); the wall ratios are printed beside.

A change that makes either faster on purpose should lower the baseline with it (measure with
`--rounds 7`, write the medians, the load and the date into benchmarks/baseline.json), so the
guard holds the gain.
"""

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks import startup

BASELINE = Path(__file__).with_name("baseline.json")
TOLERANCE = 1.5  # fail above the baseline's ratio x this: a regression of more than 50%
# Each guarded figure: the measure (benchmarks/startup.py) and which part of it.
GUARDED = {
    "tool_worker_import": ("tool_worker", "import"),
    "local_pipeline_start": ("local_pipeline", "setup"),
}


@dataclass(frozen=True)
class Verdict:
    name: str
    ratio: float  # CPU, to import boto3's, the median of the rounds'
    wall_ratio: float
    baseline: float

    @property
    def limit(self) -> float:
        return self.baseline * TOLERANCE

    @property
    def ok(self) -> bool:
        return self.ratio <= self.limit

    def line(self) -> str:
        state = "ok" if self.ok else f"REGRESSED: more than {TOLERANCE}x the baseline"
        return (
            f"{self.name}: {self.ratio:.2f}x import boto3's CPU (wall {self.wall_ratio:.2f}x); "
            f"baseline {self.baseline:.2f}x, limit {self.limit:.2f}x: {state}"
        )


def baseline_ratios(path: Path = BASELINE) -> dict[str, float]:
    """The committed baseline's CPU ratio of each guarded figure."""
    figures = json.loads(path.read_text())["ratios"]
    return {name: float(figures[name]["cpu"]) for name in GUARDED}


def measure(rounds: int) -> dict[str, tuple[float, float]]:
    """Each guarded figure's (CPU, wall) ratio to `import boto3`, medians of `rounds` rounds."""
    samples = startup.rounds(["boto3", *dict(GUARDED.values())], rounds)
    boto3 = samples["boto3"]
    out = {}
    for name, (measure_name, part) in GUARDED.items():
        mine = samples[measure_name]
        cpu = [getattr(s, f"{part}_cpu") for s in mine]
        wall = [getattr(s, f"{part}_wall") for s in mine]
        out[name] = (
            startup.median_ratio(cpu, [b.import_cpu for b in boto3]),
            startup.median_ratio(wall, [b.import_wall for b in boto3]),
        )
    return out


def verdicts(measured: dict[str, tuple[float, float]], baseline: dict[str, float]) -> list[Verdict]:
    return [Verdict(name, cpu, wall, baseline[name]) for name, (cpu, wall) in measured.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="fresh interpreters per figure (default 3)")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    results = verdicts(measure(args.rounds), baseline_ratios())
    print(
        f"start-up guard, median of {args.rounds} rounds (load average {load:.1f} on {os.cpu_count()} cores):"
    )
    for verdict in results:
        print("  " + verdict.line())
    return 0 if all(v.ok for v in results) else 1


if __name__ == "__main__":
    sys.exit(main())
