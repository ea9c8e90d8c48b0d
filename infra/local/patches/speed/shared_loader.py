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
`user_agent_cache`: the clients of the user's own tools share the loader too.
"""

import threading
from typing import Any

import botocore.loaders
import botocore.session

CHECKED_WITH = ("5.2.5",)

_original_create_loader = botocore.loaders.create_loader
_loaders: dict[str | None, Any] = {}
_lock = threading.Lock()


def shared_loader(search_path_string: str | None = None) -> Any:
    """botocore's `create_loader`, one loader per search path."""
    with _lock:
        loader = _loaders.get(search_path_string)
        if loader is None:
            loader = _loaders[search_path_string] = _original_create_loader(search_path_string)
        return loader


def install() -> None:
    # `botocore.session` took `create_loader` by name.
    botocore.session.create_loader = shared_loader
