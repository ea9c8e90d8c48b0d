"""A state machine definition parsed once on this machine is read back, not parsed, by the next
process.

moto: a definition is parsed by ANTLR's Python runtime when the state machine is created (and,
without `program_cache`, for each execution). In a fresh process the stack's definition costs
~250 ms of CPU, the parser's tables warming up included: 40% of a local runtime's first start.

Why it matters: every process that starts a local runtime pays it once: `toolpipe serve`, each
`toolpipe run` that starts a server for itself, a project's first `LocalPipeline`, and each test
that starts a server.

The patch (installed with `program_cache`, under its in-process cache): the parsed program (moto's tree of components; its callers use the program alone,
never ANTLR's parse tree) is pickled into the user's cache folder, under a hash of the definition
and of all that shapes the result: Python's, moto's and the ANTLR runtime's versions and the
source of these patches. A pickle runs code when it is read, so a file is read only from a folder
the user owns that no one else may write, and only if the user owns it; a file that fails to load
is parsed again and written anew. Locally a tool runs as the user, who could already change the
app's code (docs/concepts/security.md); deployed, nothing here runs.
"""

import hashlib
import importlib.metadata
import os
import pickle
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

CHECKED_WITH = ("5.2.5",)

CACHE_ENV = "TOOLPIPE_CACHE_DIR"
# A program of the stack's definition pickles to ~25 kB; the folder keeps the newest few.
KEPT = 32
# A temporary file this old was left by a writer that died.
STALE_SECONDS = 3600


def cache_dir() -> Path | None:
    """`$TOOLPIPE_CACHE_DIR`, else `$XDG_CACHE_HOME/toolpipe`, else `~/.cache/toolpipe`; None
    (nothing cached) for a user with no home to be found."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "toolpipe"
    try:
        return Path.home() / ".cache" / "toolpipe"
    except (RuntimeError, KeyError):  # no HOME, and no entry in the password database
        return None


def _shaping() -> bytes:
    patches = Path(__file__).resolve().parent.parent
    sources = b"".join(path.read_bytes() for path in sorted(patches.rglob("*.py")))
    versions = [sys.version, *(importlib.metadata.version(p) for p in ("moto", "antlr4-python3-runtime"))]
    return "\n".join(versions).encode() + hashlib.sha256(sources).digest()


_SHAPING: bytes | None = None


def _path(definition: str) -> Path | None:
    global _SHAPING
    folder = cache_dir()
    if folder is None:
        return None
    if _SHAPING is None:
        _SHAPING = _shaping()
    key = hashlib.sha256(_SHAPING + definition.encode()).hexdigest()
    return folder / "asl-programs" / f"{key}.pickle"


def _owned(found: os.stat_result, kind: Callable[[int], bool]) -> bool:
    """Whether what `found` describes is of `kind`, the user's own, and no one else may write it."""
    return (
        kind(found.st_mode)
        and found.st_uid == os.getuid()
        and not found.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def read(path: Path, loads: Callable[[bytes], Any] = pickle.loads) -> Any | None:
    """What `path` holds, through `loads`; None when it is absent, not the user's own, or does not
    load."""
    # Through descriptors, neither followed if a link: what is checked is what is read, even
    # if someone swaps a folder or file for another between the two.
    folder = file = -1
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        if not _owned(os.fstat(folder), stat.S_ISDIR):
            return None
        file = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder)
        if not _owned(os.fstat(file), stat.S_ISREG):
            return None
        with os.fdopen(file, "rb") as handle:
            file = -1  # closed with the handle
            return loads(handle.read())
    except Exception:  # absent, a link, cut short, of another build: made again
        return None
    finally:
        for descriptor in (file, folder):
            if descriptor >= 0:
                os.close(descriptor)


def _write(path: Path, program: Any) -> None:
    try:
        data = pickle.dumps(program, protocol=pickle.HIGHEST_PROTOCOL)
        if _layout(pickle.loads(data)) != _layout(program):
            return  # something of it does not come back as it was: this one is parsed each time
    except (pickle.PicklingError, TypeError, RecursionError):
        return
    write(path, data, KEPT)


def write(path: Path, data: bytes, kept: int) -> None:
    """Put `data` at `path`, whole or not at all, in a folder only the user may write; keep the
    newest `kept` files of the folder. A cache: a write that fails is left undone."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _owned(path.parent.lstat(), stat.S_ISDIR):
            return  # a folder someone else may write: nothing goes there, nothing is read
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")  # 0600
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)  # whole or not at all, whoever writes at the same time
        _trim(path.parent, kept)
    except OSError:
        return  # the next process makes it again


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


def _trim(folder: Path, kept: int) -> None:
    files = sorted(folder.glob("*.pickle"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in files[kept:]:
        old.unlink(missing_ok=True)
    for left in folder.glob("*.tmp"):  # a writer that died before its rename
        if time.time() - left.stat().st_mtime > STALE_SECONDS:
            left.unlink(missing_ok=True)


def through_disk(parse: Callable[[str], tuple[Any, Any]]) -> Callable[[str], tuple[Any, Any]]:
    """`parse`, with each program read from (or written to) the cache folder."""

    def parsed(definition: str) -> tuple[Any, Any]:
        path = _path(definition)
        program = None if path is None else read(path)
        if program is not None:
            return program, None  # moto's callers use the program only
        program, tree = parse(definition)
        if path is not None:
            _write(path, program)
        return program, tree

    return parsed
