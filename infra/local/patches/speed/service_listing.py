"""The services under botocore's data directories are listed once per process, not per loader.

botocore: a loader checks that a service exists by listing every service under its search path
(~400 directories, a `stat` for each of their API versions) the first time it loads a model of
a type, and keeps the list in that loader only. moto makes a new loader for each service model
it reads (`moto.core.utils._load_service_model`), so a process's first runtime listed the data
directories eight times: ~0.19 s of CPU, a fifth of that first start-up.

Why it matters: every program or test process that starts a local runtime pays it once, before
its first run (`LocalPipeline`'s start-up, `toolpipe serve`'s time to be ready).

The patch: the list is kept per search path and model type, for every loader of the process.
The directories are botocore's installed model files (and the user's `~/.aws/models`), read
only while the process runs, as `shared_loader` already assumes for the models themselves; a
loader's own cache already kept its list for the life of the loader. Process-wide, like
`shared_loader`: the clients of the user's own tools use the kept list too.
"""

import threading
from typing import Any

import botocore.loaders

CHECKED_WITH = ("5.2.5",)

_original = botocore.loaders.Loader.list_available_services
_listed: dict[tuple[tuple[str, ...], str], list[str]] = {}
_lock = threading.Lock()


def list_available_services(self: botocore.loaders.Loader, type_name: str) -> list[str]:
    """botocore's `Loader.list_available_services`, listed once per search path and type."""
    key = (tuple(dict.fromkeys(self.search_paths)), type_name)  # a duplicate directory adds none
    with _lock:
        listed = _listed.get(key)
        if listed is None:
            listed = _listed[key] = _original(self, type_name)
    return listed


def install() -> None:
    loader: Any = botocore.loaders.Loader
    loader.list_available_services = list_available_services
