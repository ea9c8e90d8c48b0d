"""Your project: the nearest folder, from a start folder upwards, whose `pyproject.toml` has a
`[tool.toolpipe]` table (as git finds `.git`), and that table.

A `pyproject.toml` without the table is another package's (a library vendored in a subfolder, a
workspace member) and is passed over: every command run anywhere in the project finds the same
root, so the same app, template and state folder (`<root>/.toolpipe`). Paths in the table are
relative to the root.
"""

import functools
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from types import MappingProxyType
from typing import Any

from toolpipe.shared.errors import ConfigurationError

PYPROJECT = "pyproject.toml"


@dataclass(frozen=True)
class Project:
    root: Path  # resolved: a symlinked folder and its target find the same root
    settings: Mapping[str, Any]  # the `[tool.toolpipe]` table

    @property
    def pyproject(self) -> Path:
        return self.root / PYPROJECT


def find_project(start: Path | None = None) -> Project | None:
    """The project `start` (default: the current folder) is in; None outside any.

    Raises:
        ConfigurationError: a `pyproject.toml` on the way up cannot be read as TOML (it might
            have been the project's: guessing past it could pick another project's state).
    """
    folder = (start or Path.cwd()).resolve()
    for candidate in (folder, *folder.parents):
        pyproject = candidate / PYPROJECT
        try:
            stat = pyproject.stat()
        except OSError:
            continue
        if not S_ISREG(stat.st_mode):
            continue
        # Every agent lookup asks (the orchestrator's steps, each tool call): parse a file once
        # per version of it, not per call.
        settings = _toolpipe_table(str(pyproject), stat.st_mtime_ns, stat.st_size)
        if settings is not None:
            return Project(candidate, settings)
    return None


@functools.lru_cache(maxsize=16)
def _toolpipe_table(pyproject: str, mtime_ns: int, size: int) -> Mapping[str, Any] | None:
    """The `[tool.toolpipe]` table of a `pyproject.toml` (its version: `mtime_ns` and `size`)."""
    path = Path(pyproject)
    try:
        config = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigurationError(f"{path}: cannot read it: {e}") from e
    tool = config.get("tool")
    table = tool.get("toolpipe") if isinstance(tool, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigurationError(f"{path}: tool.toolpipe must be a table ([tool.toolpipe])")
    return MappingProxyType(table)  # cached: no caller may change what the next one reads
