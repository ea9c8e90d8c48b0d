"""The local runtime: moto, the handlers in-process, workers, the dev server.

moto's Step Functions interpreter imports `moto.batch.utils` for one enum (its Batch task's job
statuses), and importing it runs `moto.batch`'s package, which loads moto's EC2 models and their
region, AMI and instance-type tables: ~1 s of a ~2 s start-up, for a service no state machine
here uses. The enum's module is loaded on its own instead, before anything imports the
interpreter; `moto.batch` itself still loads in full whenever something asks for it.

That happens when something first imports `moto.stepfunctions`, not when this package is
imported: `infra.local.client` is in this package, and `toolpipe run`, `show` and `agents`,
which only talk HTTP to a server or read the agents, would pay ~0.7 s for moto's core.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence


def _load_batch_utils_alone() -> None:
    if "moto.batch" in sys.modules:
        return
    spec = importlib.util.find_spec("moto.batch")
    if spec is None or spec.submodule_search_locations is None:
        return  # moto changed its layout: import it the ordinary way
    package = types.ModuleType("moto.batch")
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules["moto.batch"] = package
    try:
        importlib.import_module("moto.batch.utils")
    finally:
        del sys.modules["moto.batch"]


class _BeforeTheInterpreter(importlib.abc.MetaPathFinder):
    """Loads the enum's module alone just before `moto.stepfunctions` is first imported."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "moto.stepfunctions":
            sys.meta_path.remove(self)
            _load_batch_utils_alone()
        return None  # the ordinary finders import it


if "moto.stepfunctions" in sys.modules:
    _load_batch_utils_alone()
else:
    sys.meta_path.insert(0, _BeforeTheInterpreter())
