"""An AWS data file botocore decoded once on this machine is read back, not decoded, by the
next process.

botocore: every client reads its service's model, its endpoint rules and the partitions from
gzipped JSON files, decoded into `OrderedDict`s; moto decodes its own copies of the models it
serves, through a loader of its own each time. A local runtime's first start in a process
decodes 26 files 187 times: ~210 ms of its ~535 ms of CPU. Read from this cache, ~45 ms.

Why it matters: every process that starts a local runtime pays it once (`toolpipe serve`, each
`toolpipe run` that starts a server for itself, a project's first `LocalPipeline`, each test
that starts a server), and every in-process function's first client in it.

The patch: `JSONFileLoader._load_file`, which every botocore and moto loader reads through,
keeps what it decoded in the user's cache folder (`infra/local/user_cache.py`), under a hash
of the file's path, size, modification time and inode and of Python's and botocore's versions.
Only plain data goes there: dicts, lists, strings and numbers (a file is written only if it
loads back equal), read back by an unpickler that refuses every class, so a file planted there
cannot run code; it is also read only from a folder and file the user owns and no one else may
write. A file that does not load is decoded from the JSON again and written anew. Each load
returns new objects, as the JSON decoder did: moto adds its extras to the model it is given.

Plain dicts, not the `OrderedDict`s botocore's decoder makes: a dict keeps its keys in order
too, and neither botocore nor moto uses what only an `OrderedDict` has (`move_to_end`, an
order-sensitive `==`, a type check). The unpickler fills an `OrderedDict` item by item through
its `__setitem__`, a dict directly: half the time (the 40 largest models: 386 ms → 189 ms).
"""

import io
import os
import pickle
import stat
import sys
from collections.abc import Callable
from typing import Any

import botocore
from botocore.loaders import JSONFileLoader

from toolpipe.infra.local import user_cache

CHECKED_WITH = ("5.2.5",)

# A runtime's clients and moto read ~80 files (~4 MB pickled); a few botocore versions' worth.
KEPT = 400

_original = JSONFileLoader._load_file  # type: ignore[attr-defined]  # private, absent from the stubs
_version: bytes | None = None


class _PlainData(pickle.Unpickler):
    """Builds dicts, lists, strings and numbers: no class at all."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"not plain data: {module}.{name}")


def plain_loads(data: bytes) -> Any:
    return _PlainData(io.BytesIO(data)).load()


def _plain(data: Any) -> Any:
    """`data` with every `OrderedDict` a dict, in the same order."""
    if isinstance(data, dict):
        return {key: _plain(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_plain(value) for value in data]
    return data


def _key(full_path: str, found: os.stat_result) -> bytes:
    global _version
    if _version is None:
        # The format's name too: a file of the `OrderedDict` format before is not read again.
        _version = f"plain dicts\n{sys.version}\n{botocore.__version__}".encode()
    identity = f"{full_path}\n{found.st_size}\n{found.st_mtime_ns}\n{found.st_ino}".encode()
    return _version + b"\n" + identity


def _load_file(self: JSONFileLoader, full_path: str, open_method: Callable[..., Any]) -> Any:
    try:
        found = os.stat(full_path)
    except OSError:
        found = None
    if found is None or not stat.S_ISREG(found.st_mode):
        return _original(self, full_path, open_method)  # absent: botocore says so
    path = user_cache.entry("aws-models", _key(full_path, found), ".pickle")
    if path is None:
        return _original(self, full_path, open_method)  # no cache folder
    data = user_cache.read(path, plain_loads)
    if data is not None:
        return data
    data = _original(self, full_path, open_method)
    if data is not None:
        try:
            blob = pickle.dumps(_plain(data), protocol=pickle.HIGHEST_PROTOCOL)
            if plain_loads(blob) == data:
                user_cache.write(path, blob, KEPT)
        except (pickle.PickleError, RecursionError):
            pass  # a cache: decoded again next time
    return data


def install() -> None:
    JSONFileLoader._load_file = _load_file  # type: ignore[attr-defined]
