"""Your app's name and files, found without importing it (nor the agents package, which a
command that only hands the name on to a server need not load).

Where the name comes from, first found wins: `toolpipe --app MODULE` (the CLI puts it in the
environment), the `TOOLPIPE_APP` environment variable (what the deployed functions get), then
`[tool.toolpipe] app = "MODULE"` in the project's `pyproject.toml`: the nearest one, from the
current folder up, that has a `[tool.toolpipe]` table. `toolpipe.shared.agents.app` imports it.
"""

import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from toolpipe.shared.errors import ConfigurationError
from toolpipe.shared.project import find_project

APP_ENV = "TOOLPIPE_APP"
# The folder the module is imported from when it is not installed: the project's root.
APP_PATH_ENV = "TOOLPIPE_APP_PATH"
_SKIPPED_FOLDERS = ("__pycache__", "node_modules")


@dataclass(frozen=True)
class AppRef:
    module: str
    path: str | None = None  # added to sys.path first, when set


def valid_module_name(name: str, where: str) -> str:
    if not name or not all(part.isidentifier() for part in name.split(".")):
        raise ConfigurationError(f"{where}: '{name}' is not a module name (for example myproject.agents)")
    return name


def find_app(start: Path | None = None, environ: dict[str, str] | None = None) -> AppRef | None:
    """The app named by the environment, else by the project's `pyproject.toml`; None if neither.

    The project is the nearest folder with a `[tool.toolpipe]` table (`shared/project.py`): its
    root goes on `sys.path` first, so `app = "pkg.agents"` imports from any of its subfolders.
    """
    env = os.environ if environ is None else environ
    if env.get(APP_ENV):
        return AppRef(valid_module_name(env[APP_ENV].strip(), APP_ENV), env.get(APP_PATH_ENV) or None)
    project = find_project(start)
    if project is None:
        return None
    app = project.settings.get("app")
    if app is None:
        return None  # the project has no app: never one of a project around it
    if not isinstance(app, str):
        raise ConfigurationError(f"{project.pyproject}: [tool.toolpipe] app must be a module name string")
    return AppRef(
        valid_module_name(app.strip(), f"{project.pyproject} [tool.toolpipe] app"), str(project.root)
    )


def use_app(ref: AppRef) -> None:
    """Name the app for this process and the processes it starts (the local server, workers)."""
    os.environ[APP_ENV] = ref.module
    if ref.path:
        os.environ[APP_PATH_ENV] = ref.path
    else:
        os.environ.pop(APP_PATH_ENV, None)


def on_path(ref: AppRef) -> None:
    if ref.path and ref.path not in sys.path:
        sys.path.insert(0, ref.path)  # a project run from its folder, not installed


def app_files(ref: AppRef) -> list[Path]:
    """The app's files: every `.py` file of the top-level package its module is in (the module's
    own file when it is in none), found without importing anything; [] when it is not found."""
    top = ref.module.partition(".")[0]
    if top == "__main__":
        return []
    on_path(ref)
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations is None:
        return [Path(spec.origin)] if spec.origin and spec.origin.endswith(".py") else []
    files: list[Path] = []
    for location in spec.submodule_search_locations:
        for folder, folders, names in os.walk(location):
            folders[:] = sorted(f for f in folders if not f.startswith(".") and f not in _SKIPPED_FOLDERS)
            files.extend(Path(folder, name) for name in sorted(names) if name.endswith(".py"))
    return files


def files_signature(files: list[Path]) -> tuple[tuple[str, int, int], ...]:
    """What changes when a file is saved (its modification time and size): cheap to read often."""
    signature = []
    for path in files:
        try:
            stat = path.stat()
        except OSError:
            continue
        signature.append((str(path), stat.st_mtime_ns, stat.st_size))
    return tuple(signature)


def app_version(ref: AppRef | None) -> str | None:
    """The version of the app's files on disk: a hash of their names and contents (12 hex digits);
    None when there is no app or its files are not found."""
    return None if ref is None else files_version(app_files(ref))


def files_version(files: list[Path]) -> str | None:
    """`app_version` of these files (`app_files`); None when there are none."""
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        try:
            content = path.read_bytes()
        except OSError:
            continue
        digest.update(f"{path}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()[:12]
