"""Which worker runs which test in `make test` (pytest-xdist, `-n 3 --dist loadgroup`).

Each test file is one unit of work, run by one worker, so its module fixtures (a `toolpipe serve`
process, a state folder, a synthesized template) start once; every file of tests/infra is one
unit, so the CDK runtime starts once and each synthesized template (tests/infra/synth.py) serves
every module that asks for it. The units that take longest start first, so that the workers
finish together rather than one running a long unit alone at the end.

pytest-xdist's own `loadgroup` reads groups from a suffix it writes into each test's node id,
which pytest 9 no longer lets it change (pytest-xdist issue 1386): every test became a unit of
its own, so a module's fixtures were set up again on each worker that ran one of its tests.
Here the scheduler finds the unit from the node id itself, which no version changes.
"""

from collections import OrderedDict
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

INFRA = "tests/infra/"
# Longest first: the CDK syntheses, then the tests that start servers and CLI processes, then
# those in one process. Units of one folder go by their number of tests, most first.
ORDER = (INFRA, "tests/e2e/", "tests/reliability/", "tests/functional/")


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: "tests/infra/" for every CDK test, else its file."""
    path = nodeid.split("::", 1)[0]
    return INFRA if path.startswith(INFRA) else path


# The files whose tests take longest, in seconds of one fresh clone's run (`--durations`), started
# first within their folder: ranked by their number of tests, one of them started last ran alone
# at the end (the newcomer path, a minute long, has two tests).
SLOWEST = {
    "tests/e2e/test_newcomer_path.py": 75,
    "tests/e2e/test_serve.py": 45,
    "tests/e2e/test_benchmarks.py": 45,
    "tests/e2e/test_hidden_server.py": 40,
    "tests/e2e/test_serve_schemathesis.py": 35,
    "tests/e2e/test_hostile_tools.py": 30,
    "tests/e2e/test_light_install.py": 20,
    "tests/e2e/test_init.py": 20,
}


def _rank(unit: str, tests: int) -> tuple[int, int, int]:
    folder = next((i for i, prefix in enumerate(ORDER) if unit.startswith(prefix)), len(ORDER))
    return folder, -SLOWEST.get(unit, 0), -tests


class FileScheduling(LoadScopeScheduling):
    """pytest-xdist's scheduling by scope, with our units as the scopes, longest first."""

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node: Any) -> None:
        # The queue is built in collection order (or by size); hand out the longest unit first.
        self.workqueue = OrderedDict(
            sorted(self.workqueue.items(), key=lambda unit: _rank(unit[0], len(unit[1])))
        )
        super()._assign_work_unit(node)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: without the plugin it never runs
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> FileScheduling | None:
    """`--dist loadgroup` (`make test`) is ours; any other `--dist` is pytest-xdist's own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return FileScheduling(config, log)
