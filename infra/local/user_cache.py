"""The user's cache folder, where the local runtime keeps what a process made for the next one
(`patches/speed/parsed_programs.py`, `patches/speed/model_files.py`,
`patches/speed/service_listing.py`).

What is read from it may run code when it loads (a pickle), so a file is read only from a folder
the user owns that no one else may write, and only if the user owns it, through descriptors that
follow no link; a file written appears whole or not at all. Locally a tool runs as the user, who
could already change the app's code (docs/concepts/security.md); deployed, nothing here runs.
"""

import hashlib
import os
import pickle
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CACHE_ENV = "TOOLPIPE_CACHE_DIR"
# A temporary file this old was left by a writer that died.
STALE_SECONDS = 3600


def folder() -> Path | None:
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


def entry(kind: str, key: bytes, suffix: str) -> Path | None:
    """Where the cache of `kind` keeps what `key` names: `<folder>/<kind>/<sha256 of key><suffix>`;
    None when there is no cache folder."""
    top = folder()
    return None if top is None else top / kind / f"{hashlib.sha256(key).hexdigest()}{suffix}"


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
    directory = file = -1
    try:
        directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        if not _owned(os.fstat(directory), stat.S_ISDIR):
            return None
        file = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=directory)
        if not _owned(os.fstat(file), stat.S_ISREG):
            return None
        with os.fdopen(file, "rb") as handle:
            file = -1  # closed with the handle
            return loads(handle.read())
    except Exception:  # absent, a link, cut short, of another build: made again
        return None
    finally:
        for descriptor in (file, directory):
            if descriptor >= 0:
                os.close(descriptor)


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
        _trim(path.parent, kept, path.suffix)
    except OSError:
        return  # the next process makes it again


def _trim(directory: Path, kept: int, suffix: str) -> None:
    files = sorted(directory.glob(f"*{suffix}"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in files[kept:]:
        old.unlink(missing_ok=True)
    for left in directory.glob("*.tmp"):  # a writer that died before its rename
        if time.time() - left.stat().st_mtime > STALE_SECONDS:
            left.unlink(missing_ok=True)
