"""One botocore data loader per data path, shared by every session of the process.

botocore: a session's loader keeps the service models it decoded, but each new session has a
loader of its own, and moto resets boto3's default session every time a mock starts. So every
local runtime's start, and every function's cold start in it, decodes each service's JSON
model again (~17 ms a client; 0.15 s of a runtime's 0.5 s start-up).

Why it matters: a project's tests start a runtime per test, and each runtime starts six
functions' worth of clients.

The patch: sessions get the loader already made for their data path (`AWS_DATA_PATH`). The
models are read-only files, and a loader's cache already serves every client of a session
alike: sharing it across sessions gives the same models. It is process-wide, like
`user_agent_cache`: the clients of the user's own tools share the loader too. Each new boto3
session appends boto3's own data directory to its loader's search path: once the loader is
shared, a path already there is not appended again (the path grew by one entry a runtime, and
every model lookup walked each copy).
"""

import threading
from typing import Any

import botocore.loaders
import botocore.session

CHECKED_WITH = ("5.2.5",)

_original_create_loader = botocore.loaders.create_loader
_loaders: dict[str | None, Any] = {}
_lock = threading.Lock()


class _SearchPaths(list[str]):
    """A search path that holds each directory once: a duplicate finds nothing new."""

    def append(self, path: str) -> None:
        if path not in self:
            super().append(path)


def shared_loader(search_path_string: str | None = None) -> Any:
    """botocore's `create_loader`, one loader per search path."""
    with _lock:
        loader = _loaders.get(search_path_string)
        if loader is None:
            made: Any = _original_create_loader(search_path_string)
            made._search_paths = _SearchPaths(made.search_paths)  # what boto3 appends to
            loader = _loaders[search_path_string] = made
        return loader


def install() -> None:
    # `botocore.session` took `create_loader` by name.
    botocore.session.create_loader = shared_loader
