"""The model the runtime a command holds calls, and the model a command asks a running server for.

First found wins: `OPENAI_BASE_URL` (a real endpoint); a model script (`--scripted-model FILE`,
`TOOLPIPE_SCRIPTED_MODEL`, then the project's `[tool.toolpipe] scripted_model`, a path relative
to the project's root); else the built-in demo model, which calls only the example assistant's
tools. A script or the demo is served on 127.0.0.1, so a run works offline through the same
client code as with a real endpoint.

A server says in its health which model it was asked for (`model_wanted`, a digest: an endpoint
may carry a key in its address) and describes it (`model_endpoint`, credentials left out). A
client that asks for a model uses a server only if it was asked for the same one
(`infra/cli/session.py`).
"""

import argparse
import contextlib
import hashlib
import os
import socket
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from toolpipe.infra.cli.errors import EXIT_USAGE, CommandError
from toolpipe.shared.errors import ConfigurationError, DefinitionError
from toolpipe.shared.project import find_project

if TYPE_CHECKING:
    from toolpipe.shared.agents.agent import Agent

# How a client hands the script it was given to the server it starts (and a way to set one).
SCRIPTED_MODEL_ENV = "TOOLPIPE_SCRIPTED_MODEL"
_BASE_URL_ENV = "OPENAI_BASE_URL"
_SCRIPTED = "scripted:"  # how `wanted_model` names a script: "scripted:/abs/path.yaml"
DEMO_HINT = " (set OPENAI_BASE_URL for a real one)"
# How long a command waits to connect to OPENAI_BASE_URL before it says nothing answers there.
PROBE_SECONDS = 3.0


def scripted_model_setting(
    args: argparse.Namespace | None, env: Mapping[str, str] | None = None
) -> Path | None:
    """The model script this command asks for, or None: a real endpoint or the demo.

    The path is resolved (absolute, no `..`, no links), so two commands that name one file by
    different paths ask for the same model.

    Raises:
        CommandError: a script given explicitly while `OPENAI_BASE_URL` is set (exit 2).
        ConfigurationError: the project's pyproject.toml cannot be read.
    """
    env = os.environ if env is None else env
    flag = getattr(args, "scripted_model", None)
    given = flag or env.get(SCRIPTED_MODEL_ENV) or None
    if env.get(_BASE_URL_ENV, "").strip():
        if given:
            where = "--scripted-model" if flag else SCRIPTED_MODEL_ENV
            raise CommandError(
                f"{where} {given} and OPENAI_BASE_URL={shown(env[_BASE_URL_ENV])} both name the model: keep one",
                EXIT_USAGE,
            )
        return None
    if given:
        return Path(given).resolve()
    return project_scripted_model()


def checked_scripted_model(args: argparse.Namespace) -> Path | None:
    """`scripted_model_setting`, its file read and checked now: a broken one, or one calling a
    tool its agent lacks, is one line and exit 2 before any server starts (a server reads it
    again at each change)."""
    script = scripted_model_setting(args)
    if script is not None:
        from toolpipe.infra.local.model_script import load_script
        from toolpipe.infra.local.script_tools import check_script_tools

        first, mcp = getattr(args, "agent", None), bool(getattr(args, "mcp", None))
        check_script_tools(script, load_script(script), app_agents(), first, mcp)
    return script


def reachable_endpoint(env: Mapping[str, str] | None = None) -> None:
    """Refuse an `OPENAI_BASE_URL` nothing answers at, before any run starts.

    A refused connection, an unknown host or a silent one would otherwise show only once the
    run's model call gave up: after its retries, close to a minute later, with no word of the
    variable. A TCP connection is tried, not a request: an endpoint that answers with an error
    fails the run at once, in the endpoint's words. Through a proxy (`HTTPS_PROXY`, as the
    `openai` client would take it) there is nothing to try from here.

    Raises:
        CommandError: one line naming the variable (exit 2).
    """
    env = os.environ if env is None else env
    url = env.get(_BASE_URL_ENV, "").strip()
    if not url:
        return
    named = f"{_BASE_URL_ENV}={shown(url)}"
    try:
        parts = urllib.parse.urlsplit(url)
        scheme, host = parts.scheme, parts.hostname
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:  # a port that is not a number, a bracket left open
        scheme, host, port = "", None, 0
    if scheme not in ("http", "https") or not host:
        raise CommandError(f"{named}: not an http(s) URL (for example https://api.openai.com/v1)", EXIT_USAGE)
    if scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(host):
        return
    try:
        socket.create_connection((host, port), timeout=PROBE_SECONDS).close()
    except OSError as e:
        why = _unreachable(e)
        raise CommandError(
            f"{named}: cannot connect to {host}:{port} ({why}): start the model server there, correct "
            "the variable, or unset it for the scripted demo model",
            EXIT_USAGE,
        ) from None


def _unreachable(error: OSError) -> str:
    if isinstance(error, socket.gaierror):
        return "no such host"
    if isinstance(error, TimeoutError):
        return f"no answer within {PROBE_SECONDS:g} s"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    return error.strerror or type(error).__name__


def app_agents() -> "list[Agent]":
    """The app's agents, to check a script against; none when there is no app or it does not
    load (the command, or the server, says why itself)."""
    from toolpipe.shared.agents import all_agents

    try:
        return all_agents()
    except (ConfigurationError, DefinitionError):
        return []


def project_scripted_model(start: Path | None = None) -> Path | None:
    """`[tool.toolpipe] scripted_model` of the project `start` is in, resolved from its root;
    None outside a project or if it sets none."""
    project = find_project(start)
    if project is None:
        return None
    setting = project.settings.get("scripted_model")
    if setting is None:
        return None
    if not isinstance(setting, str) or not setting.strip():
        raise ConfigurationError(f"{project.pyproject}: [tool.toolpipe] scripted_model must be a file path")
    return (project.root / setting).resolve()


def wanted_model(args: argparse.Namespace | None, env: Mapping[str, str]) -> str | None:
    """The model this command asks for, normalised; None: any (whatever a server runs, the demo
    if it starts one). An endpoint as its URL, a script as `scripted:PATH`."""
    url = env.get(_BASE_URL_ENV, "").strip()
    if url:
        scripted_model_setting(args, env)  # refuses a script named beside it
        return normalised(url)
    script = scripted_model_setting(args, env)
    return None if script is None else f"{_SCRIPTED}{script}"


def normalised(url: str) -> str:
    """`url` as compared: `http://h:1/v1/` and `http://h:1/v1` are one endpoint."""
    return url.strip().rstrip("/")


def fingerprint(wanted: str | None) -> str | None:
    """What a server's health says of the model it was asked for: a digest, not the address."""
    return None if wanted is None else hashlib.sha256(wanted.encode()).hexdigest()[:32]


def spoken(wanted: str) -> str:
    """A `wanted_model` answer as a line names it."""
    if wanted.startswith(_SCRIPTED):
        return f"scripted model from {wanted.removeprefix(_SCRIPTED)}"
    return shown(wanted)


def unasking(wanted: str) -> str:
    """How a person stops asking for `wanted` (a refusal's advice)."""
    if wanted.startswith(_SCRIPTED):  # from a flag, the environment or the project: name all three
        return f"ask for its model (--scripted-model, {SCRIPTED_MODEL_ENV} or [tool.toolpipe] scripted_model)"
    return "unset OPENAI_BASE_URL"


def shown(url: str) -> str:
    """`url` as printed: without its user, password or query (any may hold an API key)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an address that does not parse)"
    user = "***@" if parts.username or parts.password else ""
    host = f"[{host}]" if ":" in host else host  # IPv6, as it was written
    query = "?…" if parts.query else ""
    return urllib.parse.urlunsplit((parts.scheme, f"{user}{host}{port}", parts.path, "", "")) + query


@dataclass(frozen=True)
class ModelInUse:
    """The model a runtime calls: as it reads, and the digest of what was asked (None: nothing)."""

    description: str
    wanted: str | None

    def line(self) -> str:
        """The `model endpoint: …` banner line; how to use another model only to whoever has not
        asked for one."""
        return f"model endpoint: {self.description}{DEMO_HINT if self.wanted is None else ''}\n"


@contextlib.contextmanager
def model_endpoint(args: argparse.Namespace | None = None) -> Iterator[ModelInUse]:
    """Point the orchestrator at the model `args` and the environment ask for, for the block.

    Raises:
        ModelScriptError: the script is not a model script (one line, exit 2).
    """
    wanted = wanted_model(args, os.environ)
    if os.environ.get(_BASE_URL_ENV, "").strip():
        yield ModelInUse(spoken(os.environ[_BASE_URL_ENV]), fingerprint(wanted))
        return
    from toolpipe.infra.local.model_script import FileResponder
    from toolpipe.infra.local.scripted_model import DemoResponder, Responder, ScriptedModelServer

    script = scripted_model_setting(args)
    responder: Responder = FileResponder(script, app_agents) if script is not None else DemoResponder()
    with ScriptedModelServer(responder) as server:
        description = spoken(wanted) if wanted is not None else f"scripted demo model at {server.base_url}"
        previous = {k: os.environ.get(k) for k in (_BASE_URL_ENV, "OPENAI_API_KEY")}
        os.environ[_BASE_URL_ENV] = server.base_url
        os.environ["OPENAI_API_KEY"] = "scripted"
        try:
            yield ModelInUse(description, fingerprint(wanted))
        finally:
            for k, v in previous.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
