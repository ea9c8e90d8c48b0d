"""What a call changed in the runner's `/tmp`, found and removed after it.

On Lambda `/tmp` outlives invocations: a file a call writes there, or a file there at the cold
start that a call rewrites (an app's cache, say), would be read by a later call of another run.
`snapshot` records every entry at the cold start by its inode and change time (which no call can
set back, unlike the modification time); `sweep` removes every entry that is not in it or is not
as it was. Links are never followed.
"""

import contextlib
import os
from collections.abc import Callable

# An entry as it was: (inode, change time in ns); a folder's change time moves whenever an entry
# is added to it or removed, so a folder keeps its inode only and is looked into instead.
Identity = tuple[int, int]


def _identity(entry: os.DirEntry[str]) -> Identity | None:
    try:
        stat = entry.stat(follow_symlinks=False)
    except OSError:
        return None
    return (stat.st_ino, 0 if entry.is_dir(follow_symlinks=False) else stat.st_ctime_ns)


def snapshot(root: str) -> dict[str, Identity]:
    """Every entry under `root`, by path."""
    found: dict[str, Identity] = {}
    folders = [root]
    while folders:
        folder = folders.pop()
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in entries:
                identity = _identity(entry)
                if identity is None:
                    continue
                found[entry.path] = identity
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
    return found


def sweep(root: str, kept: dict[str, Identity], remove_tree: Callable[[str], None]) -> None:
    """Remove what under `root` is not in `kept` as it is there: new entries, and entries a call
    replaced or changed. `remove_tree` removes a folder, whatever a call did to its modes."""
    folders = [root]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as listed:
                entries = list(listed)
        except OSError:  # a folder a call made unreadable: it changed, so it goes whole
            if folder != root:
                remove_tree(folder)
            continue
        for entry in entries:
            was = kept.get(entry.path)
            if was is not None and was == _identity(entry):
                if entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
            elif entry.is_dir(follow_symlinks=False):
                remove_tree(entry.path)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
