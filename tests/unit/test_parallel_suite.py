"""The suite's own parallel run (`make test`: pytest-xdist, `--dist loadgroup`): which tests share
a worker, and the reliability figures that workers hand to the controller."""

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import scheduling
from tests.reliability import report
from tests.reliability.figures import FIGURES, Figure, _Figures

ROOT = Path(__file__).resolve().parents[2]


def test_a_file_is_one_unit_and_every_infra_file_shares_one() -> None:
    assert scheduling.unit_of("tests/e2e/test_serve.py::test_a") == "tests/e2e/test_serve.py"
    assert scheduling.unit_of("tests/e2e/test_serve.py::Test::test_b[a::b@c]") == "tests/e2e/test_serve.py"
    assert scheduling.unit_of("tests/infra/test_stack.py::test_c") == "tests/infra/"
    assert scheduling.unit_of("tests/infra/test_auth.py::test_d[x]") == "tests/infra/"


def test_only_make_tests_dist_is_scheduled_by_file() -> None:
    """A serial run, or another `--dist`, is pytest-xdist's own (its hook then decides)."""
    for dist in ("no", "load", "loadfile"):
        config = SimpleNamespace(getvalue={"dist": dist}.get)
        assert scheduling.pytest_xdist_make_scheduler(config, None) is None  # type: ignore[arg-type]


def test_in_a_parallel_run_each_file_runs_on_one_worker_the_longest_first(tmp_path: Path) -> None:
    """A real `pytest -n 2 --dist loadgroup` with the suite's scheduling, on files of its own:
    pytest-xdist's own loadgroup no longer groups on pytest 9 (tests/scheduling.py)."""
    files = {
        "tests/unit/test_many.py": 6,  # the most tests, and collected first: still handed out last
        "tests/e2e/test_few.py": 3,
        "tests/infra/test_a.py": 3,
        "tests/infra/test_b.py": 2,
    }
    for name, count in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("".join(f"def test_{i}():\n    pass\n\n\n" for i in range(count)))
    options = ["-n", "2", "--dist", "loadgroup", "-v", "-p", "tests.scheduling", "-p", "no:cacheprovider"]
    options += ["-p", "no:schemathesis"]  # its plugin costs each process ~4 s at start (pyproject.toml)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *options, "-c", os.devnull, "--rootdir", str(tmp_path), *files],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ran = re.findall(r"^\[(gw\d)\] .* PASSED (\S+)::", done.stdout, re.MULTILINE)
    assert len(ran) == sum(files.values()), done.stdout
    workers = {path: {worker for worker, p in ran if p == path} for path in files}
    assert all(len(w) == 1 for w in workers.values()), workers
    assert workers["tests/infra/test_a.py"] == workers["tests/infra/test_b.py"]
    # The CDK tests and the e2e file start the workers; the file with the most tests, collected
    # first (pytest-xdist's own order would hand it out first), waits for a free worker.
    starts = {worker: next(p for w, p in ran if w == worker) for worker, _ in ran}
    assert sorted(starts.values()) == ["tests/e2e/test_few.py", "tests/infra/test_a.py"], ran


def _figure(scenario: str) -> Figure:
    return Figure(scenario, tried=3, survived=3, lost=0, duplicated=0, goal="0 lost", met=True, in_doubt=1)


def test_a_workers_figures_and_times_reach_the_controller_whole() -> None:
    worker = _Figures()
    worker.record(_figure("1 first"))
    worker.record(_figure("2 second"))
    worker.seconds["tests/reliability/test_x.py::test_a"] = 1.5
    controller = _Figures()
    controller.merge(worker.payload())
    assert sorted(controller.all(), key=lambda f: f.scenario) == [_figure("1 first"), _figure("2 second")]
    assert controller.seconds == {"tests/reliability/test_x.py::test_a": 1.5}


def test_the_controller_takes_them_in_when_a_worker_goes_down(monkeypatch: pytest.MonkeyPatch) -> None:
    controller = _Figures()
    monkeypatch.setattr(FIGURES, "merge", controller.merge)
    worker = _Figures()
    worker.record(_figure("3 third"))
    report.pytest_testnodedown(SimpleNamespace(workeroutput={"reliability": worker.payload()}), None)
    # A worker that ran no reliability test hands over nothing.
    report.pytest_testnodedown(SimpleNamespace(workeroutput={}), None)
    assert controller.all() == [_figure("3 third")]
