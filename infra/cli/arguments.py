"""The argument types: argparse calls them while parsing, so bad input is refused (exit 2, with
the usage line) before a server, a runtime or a run starts.

What the API also checks is checked by the API's own request model
(shared.messages.StartRunRequest), so the two never disagree.
"""

import argparse
import json
import os
import re
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from toolpipe.shared.errors import ConfigurationError

# `--value` absent (None is a JSON value: `--value null`).
NO_JSON = object()


def _request_error(**fields: Any) -> str | None:
    """Why `POST /runs` would refuse these fields (the first reason), or None."""
    from pydantic import ValidationError

    from toolpipe.shared.messages import StartRunRequest

    try:
        StartRunRequest.model_validate({"input": "-", **fields})
    except ValidationError as e:
        return str(e.errors()[0]["msg"])
    return None


def prompt(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the prompt is blank")
    if reason := _request_error(input=text):
        raise argparse.ArgumentTypeError(reason)
    return text


def timezone(text: str) -> str:
    if reason := _request_error(timezone=text):
        raise argparse.ArgumentTypeError(reason)
    return text


def agent_name(remote: bool) -> Callable[[str], str]:
    """An agent of this folder's app; for a deployed stack (`remote`), any well-formed name:
    its agents are its app's, not this folder's, and it answers for them itself."""

    def agent(name: str) -> str:
        from toolpipe.shared.agents import get_agent
        from toolpipe.shared.agents.errors import UnknownAgentError

        if remote:
            if _request_error(agent=name) is not None:
                raise argparse.ArgumentTypeError(f"not an agent name: {name!r}")
            return name
        try:
            get_agent(name)
        except UnknownAgentError as e:
            raise argparse.ArgumentTypeError(f"{e}; `toolpipe agents` lists them with their tools") from None
        except ConfigurationError as e:  # the app could not be loaded: why, in one line
            raise argparse.ArgumentTypeError(str(e)) from None
        return name

    return agent


def mcp_url(text: str) -> str:
    if _request_error(mcp_servers=[text]) is not None:
        raise argparse.ArgumentTypeError(f"not an http(s) URL: {text!r}")
    return text


def model_name(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("the model name is blank")
    return text


def default_timezone(err: TextIO) -> str:
    """`TZ` when it names an IANA zone (it may hold a POSIX rule such as `CET-1CEST`), else UTC."""
    zone = os.environ.get("TZ", "").removeprefix(":")
    if not zone:
        return "UTC"
    if _request_error(timezone=zone) is not None:
        err.write(f"toolpipe: warning: TZ={zone!r} is not an IANA time zone; using UTC (see --timezone)\n")
        return "UTC"
    return zone


def seconds(limit: float | None) -> Callable[[str], float]:
    """A number of seconds, more than 0 and at most `limit` (None: any finite one)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if limit is None and not 0 < value < float("inf"):  # also refuses nan
            raise argparse.ArgumentTypeError(f"must be a positive, finite number of seconds, not {text}")
        if limit is not None and not 0 < value <= limit:  # also refuses nan and inf
            raise argparse.ArgumentTypeError(f"must be more than 0 and at most {limit:g} seconds, not {text}")
        return value

    return parse


# Checked before anything starts: a run must not be left behind by a wait that cannot be. The
# event stream waits an hour at most.
wait_seconds = seconds(3600)


def port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"not a port (0-65535): {text!r}")
    return int(text)


def run_id(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", text):
        raise argparse.ArgumentTypeError(f"not a run id: {text!r}")
    return text


def event_file(text: str) -> Path:
    path = Path(text)
    try:
        json.loads(path.read_text())
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot read {text}: {e.strerror}") from None
    except ValueError as e:  # UnicodeDecodeError too
        raise argparse.ArgumentTypeError(f"{text} is not a JSON event: {e}") from None
    return path


def readable_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file() or not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"not a readable file: {text}")
    return path


def folder(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("the folder name is blank")
    return Path(text)


def api_url(text: str) -> str:
    """A deployed API's URL, checked before credentials or the network are looked at."""
    text = text.strip()
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018  # raises on a port that is not a number
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a URL: {text!r} ({e})") from None
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"not an http(s) URL of an API: {text!r} (its ApiUrl output)")
    return text


def json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from e


def approval_id(text: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{32}", text):
        raise argparse.ArgumentTypeError(f"not an approval id (32 hex digits): {text!r}")
    return text


def arguments_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise argparse.ArgumentTypeError(f"--arguments is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--arguments must be a JSON object")
    return value


def reason_text(text: str) -> str:
    if not text.strip() or len(text) > 1000:
        raise argparse.ArgumentTypeError("the reason is 1 to 1000 characters, not blank")
    return text


def _at_least_one(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be above 0: {text!r}")
        return value

    return parse


def add_limit_flags(command: argparse.ArgumentParser) -> None:
    """`resume`'s flags: the agent's limits to raise, each named as the agent names it."""
    for name, kind, what in (
        ("max_iterations", int, "model turns in all"),
        ("max_tool_calls", int, "tool calls in all"),
        ("max_tokens", int, "tokens in all"),
        ("max_cost_usd", float, "model cost in all, in USD"),
        ("max_duration", int, "wall-clock seconds from the resume"),
    ):
        command.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=_at_least_one(kind),
            metavar="N",
            help=f"raise the agent's {name} ({what}) for the rest of the run",
        )
