"""The model the runtime a command holds calls: `OPENAI_BASE_URL`, else a scripted demo model;
and the model a command asks a running server for.

With no `OPENAI_BASE_URL` set, a scripted OpenAI-compatible model is served on 127.0.0.1, so a
run works offline through the same client code as with a real endpoint.

A server says in its health which model it was asked for (`model_wanted`, a digest: an endpoint
may carry a key in its address) and describes it (`model_endpoint`, credentials left out). A
client that asks for a model uses a server only if it was asked for the same one
(`infra/cli/session.py`).
"""

import argparse
import contextlib
import hashlib
import os
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

DEMO_HINT = " (set OPENAI_BASE_URL for a real one)"


def wanted_model(args: argparse.Namespace | None, env: Mapping[str, str]) -> str | None:
    """The model this command asks for, normalised; None: any (whatever a server runs).

    Today `OPENAI_BASE_URL`. A model named another way (a scripted model's file, from a flag or
    the project's settings) is one more case here, as its own normalised string (`scripted:PATH`).
    """
    url = env.get("OPENAI_BASE_URL", "").strip()
    return normalised(url) if url else None


def normalised(url: str) -> str:
    """`url` as compared: `http://h:1/v1/` and `http://h:1/v1` are one endpoint."""
    return url.strip().rstrip("/")


def fingerprint(wanted: str | None) -> str | None:
    """What a server's health says of the model it was asked for: a digest, not the address."""
    return None if wanted is None else hashlib.sha256(wanted.encode()).hexdigest()[:32]


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
        """The `model endpoint: …` banner line; how to use a real model only to whoever has not
        asked for one."""
        return f"model endpoint: {self.description}{DEMO_HINT if self.wanted is None else ''}\n"


@contextlib.contextmanager
def model_endpoint(args: argparse.Namespace | None = None) -> Iterator[ModelInUse]:
    """Point the orchestrator at the model `args` and the environment ask for, for the block."""
    wanted = wanted_model(args, os.environ)
    if wanted is not None:
        yield ModelInUse(shown(wanted), fingerprint(wanted))
        return
    from toolpipe.infra.local.scripted_model import DemoResponder, ScriptedModelServer

    with ScriptedModelServer(DemoResponder()) as server:
        previous = {k: os.environ.get(k) for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
        os.environ["OPENAI_BASE_URL"] = server.base_url
        os.environ["OPENAI_API_KEY"] = "scripted"
        try:
            yield ModelInUse(f"scripted demo model at {server.base_url}", None)
        finally:
            for k, v in previous.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
