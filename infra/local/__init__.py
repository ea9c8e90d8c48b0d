"""The local runtime: moto, the handlers in-process, workers, the dev server.

moto's Step Functions interpreter imports `moto.batch.utils` for one enum (its Batch task's job
statuses), and importing it runs `moto.batch`'s package, which loads moto's EC2 models and their
region, AMI and instance-type tables: ~1 s of a ~2 s start-up, for a service no state machine
here uses. The enum's module is loaded on its own instead, before anything imports the
interpreter; `moto.batch` itself still loads in full whenever something asks for it.
"""

import importlib
import importlib.util
import sys
import types


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


_load_batch_utils_alone()
