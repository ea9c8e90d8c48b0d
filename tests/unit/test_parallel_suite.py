"""The suite's own parallel run (`make test`: pytest-xdist, `--dist loadgroup`): which tests share
a worker, and the reliability figures that workers hand to the controller."""

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests import conftest
from tests.reliability import report
from tests.reliability.figures import FIGURES, Figure, _Figures

TESTS = Path(conftest.__file__).parent


class _Item:
    """What the grouping reads of a collected test: its file, and the markers it is given."""

    def __init__(self, path: Path) -> None:
        self.fspath = path
        self.groups: list[str] = []

    def add_marker(self, marker: Any) -> None:
        assert marker.name == "xdist_group"
        self.groups.append(marker.args[0])


def _grouped(loadgroup: bool, *paths: Path) -> list[list[str]]:
    items = [_Item(path) for path in paths]
    config = SimpleNamespace(option=SimpleNamespace(loadgroup=loadgroup))
    conftest.pytest_collection_modifyitems(config, items)  # type: ignore[arg-type]
    return [item.groups for item in items]


def test_a_file_is_one_group_and_every_infra_file_shares_one() -> None:
    serve, api = TESTS / "e2e" / "test_serve.py", TESTS / "functional" / "test_api.py"
    stack, auth = TESTS / "infra" / "test_stack.py", TESTS / "infra" / "test_auth.py"
    groups = _grouped(True, serve, serve, api, stack, auth)
    assert groups == [[str(serve)], [str(serve)], [str(api)], ["infra"], ["infra"]]


def test_a_serial_run_gets_no_groups() -> None:
    assert _grouped(False, TESTS / "e2e" / "test_serve.py", TESTS / "infra" / "test_stack.py") == [[], []]


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
