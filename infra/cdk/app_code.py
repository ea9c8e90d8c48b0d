"""The functions' code asset: toolpipe's runtime packages and your app's package, side by side.

A Lambda imports `toolpipe.functions.<handler>` and, at its first run, your app module
(`TOOLPIPE_APP`); both must be in its code. Third-party packages come from the layers
(`infra/cdk/bundling.py`), never from here.
"""

import atexit
import importlib.util
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import toolpipe

# What the Lambdas import of toolpipe: the runtime, not the CDK app or the local emulator.
_RUNTIME_PARTS = ("__init__.py", "shared", "functions")
_NOT_CODE = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", ".pytest_cache")


def app_source(app: str) -> Path:
    """The file or folder holding the top-level package (or module) of `app`, found without
    importing it (a synth must not run agent code)."""
    top = app.split(".")[0]
    if top == "toolpipe":
        raise ValueError(f"app module '{app}': your app must be a package of your own, not toolpipe")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as e:
        raise ValueError(f"app module '{app}': {e}") from e
    if spec is None:
        raise ValueError(
            f"app module '{app}' not found: run the CDK app from your project's folder, or install the project"
        )
    if spec.submodule_search_locations is not None:  # a package: its whole folder
        locations = list(spec.submodule_search_locations)
        if spec.origin is None or not locations:
            raise ValueError(f"app module '{app}': '{top}' is a namespace package; give it an __init__.py")
        return Path(locations[0])
    if spec.origin is None:
        raise ValueError(f"app module '{app}': '{top}' has no source file to bundle")
    return Path(spec.origin)


def stage_code(app: str, packages: Sequence[str] = ()) -> Path:
    """A folder with `toolpipe/` (runtime parts only), your app's top-level package and the
    other top-level `packages` of yours it imports."""
    root = Path(toolpipe.__file__).resolve().parent
    sources: list[tuple[Path, Path]] = [(root / part, Path("toolpipe") / part) for part in _RUNTIME_PARTS]
    for name in dict.fromkeys([app, *packages]):  # in order, once each
        source = app_source(name)
        if any(target == Path(source.name) for _, target in sources):
            continue  # the app's own package, named again
        sources.append((source, Path(source.name)))
    # A new private folder each time (mkdtemp: mode 0700), removed when this process ends: CDK
    # copies the asset into its output folder during the synth, and hashes it from its content.
    staging = Path(tempfile.mkdtemp(prefix="toolpipe-code-"))
    atexit.register(shutil.rmtree, staging, ignore_errors=True)
    for source, target in sources:
        destination = staging / target
        if source.is_dir():
            # Symlinks followed: toolpipe's subpackages are links to the repository's folders.
            shutil.copytree(source, destination, ignore=_NOT_CODE)
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination)
    return staging
