"""Your app: the module of your own package that defines your agents, imported and reloaded.

Every `Agent` defined at the module's top level is registered under its name. How the module
is named, and its files found, is `toolpipe.shared.app_ref` (which imports no agent).
"""

import functools
import importlib
import importlib.util
import os
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from toolpipe.shared.agents.agent import Agent
from toolpipe.shared.agents.app_bytecode import check_by_hash
from toolpipe.shared.app_ref import AppRef, app_files, files_version, find_app, on_path
from toolpipe.shared.errors import ConfigurationError, DefinitionError


def import_app(ref: AppRef, files: list[Path] | None = None) -> ModuleType:
    """Import the app's module; `files`: its `app_files`, when the caller has them already."""
    on_path(ref)
    # A file saved twice in one second runs its second save.
    check_by_hash(app_files(ref) if files is None else files)
    try:
        return importlib.import_module(ref.module)
    except ModuleNotFoundError as e:
        # The app itself (or a package above it) is missing, not something it imports.
        if e.name is not None and (ref.module == e.name or ref.module.startswith(e.name + ".")):
            raise ConfigurationError(
                f"app module '{ref.module}' not found: install your project (pip install -e .) "
                f"or run toolpipe from its folder"
            ) from e
        raise ConfigurationError(f"app module '{ref.module}' cannot be imported: {_one_line(e)}") from e
    except Exception as e:  # the user's code raised at import: say where, in one line
        raise ConfigurationError(f"app module '{ref.module}' cannot be imported: {_one_line(e)}") from e


def _one_line(error: BaseException) -> str:
    where = ""
    if isinstance(error, SyntaxError) and error.filename:
        where = f" ({error.filename}, line {error.lineno})"
    else:
        # The deepest line of the user's own code: a `DefinitionError` is raised inside toolpipe
        # (`@tool` checks the function), but the line to fix is where the app applied it.
        frames = traceback.extract_tb(error.__traceback__)
        theirs = [f for f in frames if not _toolpipes_own(f.filename)]
        frame = (theirs or frames)[-1] if frames else None
        if frame is not None:
            where = f" ({frame.filename}, line {frame.lineno})"
    text = error.msg if isinstance(error, SyntaxError) else str(error)  # its str() has the place too
    message = " ".join(str(text).split())
    return f"{type(error).__name__}: {message}{where}" if message else f"{type(error).__name__}{where}"


def _toolpipes_own(filename: str) -> bool:
    """Whether a traceback's file is toolpipe's code or the import machinery's, not the app's."""
    if filename.startswith("<"):  # <frozen importlib._bootstrap>
        return True
    return os.path.realpath(filename).startswith(_own_folders())


@functools.cache
def _own_folders() -> tuple[str, ...]:
    # Real paths: in a checkout, `toolpipe/shared` and its siblings are links to the top-level
    # folders (beside `examples/`, which is an app's code, not toolpipe's).
    package = Path(str(sys.modules["toolpipe"].__file__)).parent  # imported before any of its modules
    folders = [package, package / "shared", package / "functions", package / "infra"]
    return tuple(os.path.join(os.path.realpath(folder), "") for folder in folders)


def agents_of(module: ModuleType) -> list[Agent]:
    """The module's top-level agents, in definition order; two of one name are an error."""
    found: dict[str, Agent] = {}
    for name, value in vars(module).items():
        if isinstance(value, Agent):
            other = found.get(value.name)
            if other is not None and other is not value:
                raise ConfigurationError(
                    f"app module '{module.__name__}': two agents are named '{value.name}' ({name} is one)"
                )
            found[value.name] = value
    return list(found.values())


_loaded: AppRef | None = None
_version: str | None = None  # the version of the app `_loaded` imported
_lock = threading.Lock()
# The app's own agents, as it defines them: any other agent of a registry was put there in code.
_from_app: dict[str, Agent] = {}


def load_app(registry: dict[str, Agent]) -> None:
    """Import the app once per process and add its agents to `registry`; agents registered in
    code (tests, `AGENTS[name] = agent`) are kept."""
    global _loaded, _version
    ref = find_app()
    with _lock:
        if ref is None or ref == _loaded:
            return
        files = app_files(ref)
        version = files_version(files)  # before the import: a file saved meanwhile is a newer version
        module = import_app(ref, files)
        agents = agents_of(module)
        if not agents:
            raise ConfigurationError(f"app module '{ref.module}' defines no Agent at its top level")
        for agent in agents:
            registry.setdefault(agent.name, agent)
            _from_app[agent.name] = agent
        refusal = waiting_child(agents, registry)
        if refusal is not None:
            raise DefinitionError(refusal)
        _loaded, _version = ref, version


def reload_app(registry: dict[str, Agent]) -> str | None:
    """Import the app again from its files (`toolpipe serve` after a save): its package's modules
    are imported anew and its agents replace the ones it had; agents registered in code stay.
    The new version, once loaded.

    Raises:
        ConfigurationError, DefinitionError: the app cannot be loaded; the agents loaded before
            stay registered (a run in progress goes on with them) and the next reload tries again.
    """
    global _loaded, _version
    ref = find_app()
    if ref is None:
        return None
    top = ref.module.partition(".")[0]
    with _lock:
        files = app_files(ref)
        version = files_version(files)
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".")]:
            del sys.modules[name]
        importlib.invalidate_caches()
        module = import_app(ref, files)
        agents = {agent.name: agent for agent in agents_of(module)}
        if not agents:
            raise ConfigurationError(f"app module '{ref.module}' defines no Agent at its top level")
        candidate = {n: a for n, a in registry.items() if _from_app.get(n) is not a} | agents
        refusal = waiting_child(list(agents.values()), candidate)
        if refusal is not None:
            raise DefinitionError(refusal)
        # Key by key, never emptied: a step reading the registry meanwhile finds an agent.
        for name, agent in agents.items():
            if registry.get(name) is None or registry.get(name) is _from_app.get(name):
                registry[name] = agent
        for name, agent in list(_from_app.items()):
            if name not in agents and registry.get(name) is agent:
                del registry[name]
        _from_app.clear()
        _from_app.update(agents)
        _loaded, _version = ref, version
        return version


def loaded_version() -> str | None:
    """The version of the app this process loaded (`app_version` of its files then)."""
    with _lock:
        return _version


def waiting_child(agents: list[Agent], registry: dict[str, Agent]) -> str | None:
    """Why an agent tool of `agents` may not run its agent, for the first one that may not: that
    agent's calls may wait for a person or a program, for days, while the parent's call waits on
    a heartbeat the busy child cannot beat. None: every agent tool may."""
    for agent in agents:
        for t in agent.tools:
            target = registry.get(t.child_agent) if t.child_agent else None
            # The child run may hand itself on: every agent it can reach answers the parent.
            for reached in reachable(target, registry) if target is not None else []:
                if reached.waits:
                    return child_waits(agent.name, t.name, reached.name)
    return None


def reachable(agent: Agent, registry: dict[str, Agent]) -> list[Agent]:
    """`agent` and every agent its handoffs lead to, through theirs (each once; targets not
    registered are skipped: a transfer to one is refused when the model makes it)."""
    found: dict[str, Agent] = {agent.name: agent}
    pending = [agent]
    while pending:
        for handoff in pending.pop().transfers:
            target = registry.get(handoff.target)
            if target is not None and target.name not in found:
                found[target.name] = target
                pending.append(target)
    return list(found.values())


def child_waits(parent: str, tool: str, child: str) -> str:
    return (
        f"agent '{parent}': tool '{tool}' runs agent '{child}', whose calls may wait for a person or "
        "a program; an agent tool's agent cannot (give those tools to the parent agent)"
    )


def registered_in_code(name: str, registry: dict[str, Agent]) -> bool:
    """`name` is an agent this process put in `registry` itself (`AGENTS[name] = agent`, a test's
    replacement of an app agent), not the app's own: another process that imports the app does
    not have it."""
    load_app(registry)
    agent = registry.get(name)
    return agent is not None and _from_app.get(name) is not agent


@dataclass(frozen=True)
class Loaded:
    """What a process has loaded of apps, to put back (`LocalPipeline(app=...)` names one for
    its own length only): the registry's agents, and which app is loaded."""

    registry: dict[str, Agent]
    app: AppRef | None
    from_app: dict[str, Agent]
    version: str | None = None


def loaded(registry: dict[str, Agent]) -> Loaded:
    with _lock:
        return Loaded(dict(registry), _loaded, dict(_from_app), _version)


def put_back(state: Loaded, registry: dict[str, Agent]) -> None:
    global _loaded, _version
    with _lock:
        registry.clear()
        registry.update(state.registry)
        _from_app.clear()
        _from_app.update(state.from_app)
        _loaded, _version = state.app, state.version
