"""The model the runtime a command holds calls: `OPENAI_BASE_URL`, else a scripted demo model.

With no `OPENAI_BASE_URL` set, a scripted OpenAI-compatible model is served on 127.0.0.1, so a
run works offline through the same client code as with a real endpoint.
"""

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def model_endpoint() -> Iterator[str]:
    """Point the orchestrator at a model for the block; yields how the endpoint reads."""
    if os.environ.get("OPENAI_BASE_URL"):
        yield os.environ["OPENAI_BASE_URL"]
        return
    from toolpipe.infra.local.scripted_model import DemoResponder, ScriptedModelServer

    with ScriptedModelServer(DemoResponder()) as server:
        description = f"scripted demo model at {server.base_url} (set OPENAI_BASE_URL for a real one)"
        previous = {k: os.environ.get(k) for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
        os.environ["OPENAI_BASE_URL"] = server.base_url
        os.environ["OPENAI_API_KEY"] = "scripted"
        try:
            yield description
        finally:
            for k, v in previous.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
