"""The reliability suite: each scenario measures one guarantee at scale, prints one figure
line and asserts its goal. At the end of the session the figures are printed as a table and,
when `TOOLPIPE_RELIABILITY_REPORT` names a file, written there as Markdown (`make reliability`
regenerates docs/RELIABILITY.md that way): tests/reliability/report.py, whose hooks
tests/conftest.py loads, since the controller of a parallel run (pytest-xdist) may never load
this file."""

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.figures import FIGURES


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.reliability)


@pytest.fixture(autouse=True)
def _timed(request: pytest.FixtureRequest) -> Iterator[None]:
    started = time.monotonic()
    yield
    FIGURES.seconds[request.node.nodeid] = time.monotonic() - started


def pytest_sessionfinish(session: pytest.Session) -> None:
    # A pytest-xdist worker: its figures go to the controller, which prints and writes them.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["reliability"] = FIGURES.payload()
