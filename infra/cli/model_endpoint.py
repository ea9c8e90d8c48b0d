"""The model the runtime a command holds calls: `OPENAI_BASE_URL`, else a scripted model.

First found wins: `OPENAI_BASE_URL` (a real endpoint); a model script (`--scripted-model FILE`,
`TOOLPIPE_SCRIPTED_MODEL`, then the project's `[tool.toolpipe] scripted_model`, a path relative
to the folder of that pyproject.toml); else the built-in demo model, which calls only the example
assistant's tools. A script or the demo is served on 127.0.0.1, so a run works offline through
the same client code as with a real endpoint.
"""

import argparse
import contextlib
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

from toolpipe.infra.cli.errors import EXIT_USAGE, CommandError
from toolpipe.shared.errors import ConfigurationError

# How a client hands the script it was given to the server it starts (and a way to set one).
SCRIPTED_MODEL_ENV = "TOOLPIPE_SCRIPTED_MODEL"
_BASE_URL_ENV = "OPENAI_BASE_URL"


def scripted_model_setting(args: argparse.Namespace) -> Path | None:
    """The model script this command asks for, or None: a real endpoint or the demo.

    The path is resolved (absolute, no `..`, no links), so two commands that name one file by
    different paths describe it alike (`describe`).

    Raises:
        CommandError: a script given explicitly while `OPENAI_BASE_URL` is set (exit 2).
        ConfigurationError: the project's pyproject.toml cannot be read.
    """
    given = getattr(args, "scripted_model", None) or os.environ.get(SCRIPTED_MODEL_ENV) or None
    if os.environ.get(_BASE_URL_ENV):
        if given:
            where = "--scripted-model" if getattr(args, "scripted_model", None) else SCRIPTED_MODEL_ENV
            raise CommandError(
                f"{where} {given} and OPENAI_BASE_URL={os.environ[_BASE_URL_ENV]} both name the model: "
                "keep one",
                EXIT_USAGE,
            )
        return None
    if given:
        return Path(given).resolve()
    return project_scripted_model()


def checked_scripted_model(args: argparse.Namespace) -> Path | None:
    """`scripted_model_setting`, its file read and checked now: a broken one is one line and
    exit 2 before any server starts (a server reads it again at each change)."""
    script = scripted_model_setting(args)
    if script is not None:
        from toolpipe.infra.local.model_script import load_script

        load_script(script)
    return script


def project_scripted_model(start: Path | None = None) -> Path | None:
    """`[tool.toolpipe] scripted_model` of the nearest project (a pyproject.toml with
    `[tool.toolpipe]`, from `start` upwards), resolved from its folder; None if it sets none."""
    folder = (start or Path.cwd()).absolute()
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if not pyproject.is_file():
            continue
        try:
            config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise ConfigurationError(f"{pyproject}: cannot read it: {e}") from None
        settings = config.get("tool", {}).get("toolpipe")
        if not isinstance(settings, dict):
            continue  # not a toolpipe project: look further up
        setting = settings.get("scripted_model")
        if setting is None:
            return None
        if not isinstance(setting, str) or not setting.strip():
            raise ConfigurationError(f"{pyproject}: [tool.toolpipe] scripted_model must be a file path")
        return (candidate / setting).resolve()
    return None


def describe(script: Path | None, demo_url: str = "") -> str:
    """The model as the banner and the server's /health `model_endpoint` name it: a client that
    wants another model compares this string (an endpoint, or a script by its absolute path)."""
    if script is not None:
        return f"scripted model from {script}"
    if os.environ.get(_BASE_URL_ENV):
        return os.environ[_BASE_URL_ENV]
    return f"scripted demo model at {demo_url} (set OPENAI_BASE_URL for a real one)"


@contextlib.contextmanager
def model_endpoint(script: Path | None = None) -> Iterator[str]:
    """Point the orchestrator at a model for the block; yields how the endpoint reads.

    Raises:
        ModelScriptError: `script` is not a model script (one line, exit 2).
    """
    if os.environ.get(_BASE_URL_ENV):
        yield describe(None)
        return
    from toolpipe.infra.local.model_script import FileResponder
    from toolpipe.infra.local.scripted_model import DemoResponder, Responder, ScriptedModelServer

    responder: Responder = FileResponder(script) if script is not None else DemoResponder()
    with ScriptedModelServer(responder) as server:
        description = describe(script, server.base_url)  # before OPENAI_BASE_URL names it
        previous = {k: os.environ.get(k) for k in (_BASE_URL_ENV, "OPENAI_API_KEY")}
        os.environ[_BASE_URL_ENV] = server.base_url
        os.environ["OPENAI_API_KEY"] = "scripted"
        try:
            yield description
        finally:
            for k, v in previous.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
