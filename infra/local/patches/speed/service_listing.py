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

Across processes too: a process's first runtime still listed three times (botocore's and
boto3's data for the clients' models and their endpoint rules; moto's package and botocore's
data for moto's), ~47 ms, 12% of a `LocalPipeline`'s start. Each directory's list is kept in
the user's cache folder (`infra/local/user_cache.py`, as JSON: reading it runs no code), keyed
by the directory, its modification time and inode, the model type and botocore's version, and
only for the directories installed with botocore, boto3 or moto, which change only when the
package is installed again (a service added or removed changes the directory's modification
time; a model type added to a service already there does not, which only an edit of the
installed package in place could do, as a `git checkout` in an editable botocore: delete the
cache folder then). Any other directory, such as `~/.aws/models`, is listed by botocore itself,
every time.
"""

import json
import os
import threading
from typing import Any

import boto3
import botocore
import botocore.loaders
import moto

from toolpipe.infra.local import user_cache

CHECKED_WITH = ("5.2.5",)

_original = botocore.loaders.Loader.list_available_services
_listed: dict[tuple[tuple[str, ...], str], list[str]] = {}
_lock = threading.Lock()
# The lists kept on disk: a few per botocore version and model type.
KEPT = 50
# The packages whose installed data directories are listed from the cache.
_PACKAGES = tuple(
    os.path.join(os.path.realpath(os.path.dirname(str(p.__file__))), "") for p in (botocore, boto3, moto)
)


def list_available_services(self: botocore.loaders.Loader, type_name: str) -> list[str]:
    """botocore's `Loader.list_available_services`, listed once per search path and type."""
    key = (tuple(dict.fromkeys(self.search_paths)), type_name)  # a duplicate directory adds none
    with _lock:
        listed = _listed.get(key)
        if listed is None:
            listed = _listed[key] = _listing(self, type_name)
    return listed


def _listing(loader: botocore.loaders.Loader, type_name: str) -> list[str]:
    """botocore's list, directory by directory: each installed one's read from the cache."""
    locations = list(loader._potential_locations())  # type: ignore[attr-defined]  # private: the search paths that exist
    if not all(_installed(location) for location in locations):
        return _original(loader, type_name)
    services: set[str] = set()
    for location in locations:
        services.update(_listed_at(loader, location, type_name))
    return sorted(services)


def _installed(location: str) -> bool:
    return os.path.join(os.path.realpath(location), "").startswith(_PACKAGES)


def _listed_at(loader: botocore.loaders.Loader, location: str, type_name: str) -> list[str]:
    """botocore's own list of one directory, kept in the user's cache folder."""
    found = os.stat(location)
    identity = f"{location}\n{found.st_mtime_ns}\n{found.st_ino}\n{type_name}\n{botocore.__version__}"
    path = user_cache.entry("aws-listings", identity.encode(), ".json")
    kept = None if path is None else user_cache.read(path, json.loads)
    if isinstance(kept, list) and all(isinstance(name, str) for name in kept):
        return kept
    one = botocore.loaders.Loader(
        extra_search_paths=[location], file_loader=loader.file_loader, include_default_search_paths=False
    )
    listed = list(_original(one, type_name))
    if path is not None:
        user_cache.write(path, json.dumps(listed).encode(), KEPT)
    return listed


def install() -> None:
    loader: Any = botocore.loaders.Loader
    loader.list_available_services = list_available_services
