"""A state machine definition parsed once on this machine is read back, not parsed, by the next
process.

moto: a definition is parsed by ANTLR's Python runtime when the state machine is created (and,
without `program_cache`, for each execution). In a fresh process the stack's definition costs
~250 ms of CPU, the parser's tables warming up included: 40% of a local runtime's first start.

Why it matters: every process that starts a local runtime pays it once: `toolpipe serve`, each
`toolpipe run` that starts a server for itself, a project's first `LocalPipeline`, and each test
that starts a server.

The patch (installed with `program_cache`, under its in-process cache): the parsed program (moto's tree of components; its callers use the program alone,
never ANTLR's parse tree) is pickled into the user's cache folder (`infra/local/user_cache.py`,
which reads only what no one but the user may write), under a hash of the definition and of all
that shapes the result: Python's, moto's and the ANTLR runtime's versions and the source of
these patches. A file that fails to load is parsed again and written anew.
"""

import hashlib
import importlib.metadata
import pickle
import sys
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

from toolpipe.infra.local import user_cache

CHECKED_WITH = ("5.2.5",)

# A program of the stack's definition pickles to ~25 kB; the folder keeps the newest few.
KEPT = 32


def _shaping() -> bytes:
    patches = Path(__file__).resolve().parent.parent
    sources = b"".join(path.read_bytes() for path in sorted(patches.rglob("*.py")))
    versions = [sys.version, *(importlib.metadata.version(p) for p in ("moto", "antlr4-python3-runtime"))]
    return "\n".join(versions).encode() + hashlib.sha256(sources).digest()


_SHAPING: bytes | None = None


def _path(definition: str) -> Path | None:
    global _SHAPING
    if _SHAPING is None:
        _SHAPING = _shaping()
    return user_cache.entry("asl-programs", _SHAPING + definition.encode(), ".pickle")


def _write(path: Path, program: Any) -> None:
    try:
        data = pickle.dumps(program, protocol=pickle.HIGHEST_PROTOCOL)
        if _layout(pickle.loads(data)) != _layout(program):
            return  # something of it does not come back as it was: this one is parsed each time
    except (pickle.PicklingError, TypeError, RecursionError):
        return
    user_cache.write(path, data, KEPT)


def _layout(root: Any) -> list[Any]:
    """Every value reachable from `root`, flattened in one order (objects by their class and
    attributes, shared ones by where they were first met): equal exactly when two object graphs
    are the same. A program read back is kept only if it is laid out as the one parsed."""
    out: list[Any] = []
    seen: dict[int, int] = {}
    stack = [root]
    while stack:
        value = stack.pop()
        if value is None or isinstance(value, (bool, int, float, str, bytes)):
            out.append((type(value).__name__, value))
            continue
        if id(value) in seen:
            out.append(("seen", seen[id(value)]))
            continue
        seen[id(value)] = len(seen)
        kind = type(value)
        out.append((kind.__module__, kind.__qualname__))
        if isinstance(value, Enum):
            out.append(value._name_)
        elif isinstance(value, (list, tuple)):
            out.append(len(value))
            stack.extend(reversed(value))
        elif isinstance(value, (set, frozenset)):
            out.append(sorted(map(repr, value)))
        elif isinstance(value, dict):
            out.append(len(value))
            for key, item in reversed(list(value.items())):
                stack.extend((item, key))
        else:
            fields = dict(getattr(value, "__dict__", {}))
            for name in getattr(kind, "__slots__", ()):
                if hasattr(value, name):
                    fields[name] = getattr(value, name)
            out.append(sorted(fields))
            stack.extend(fields[name] for name in sorted(fields, reverse=True))
    return out


def through_disk(parse: Callable[[str], tuple[Any, Any]]) -> Callable[[str], tuple[Any, Any]]:
    """`parse`, with each program read from (or written to) the cache folder."""

    def parsed(definition: str) -> tuple[Any, Any]:
        path = _path(definition)
        program = None if path is None else user_cache.read(path)
        if program is not None:
            return program, None  # moto's callers use the program only
        program, tree = parse(definition)
        if path is not None:
            _write(path, program)
        return program, tree

    return parsed
