"""The fingerprint of a call's arguments, as approved: what the worker checks before it runs."""

import hashlib
import json
from typing import Any

from toolpipe.shared.tools.tool import Tool


def canonical_json(arguments: Any) -> str:
    """One spelling per value: keys sorted, no spaces, non-ASCII as is. `{"b": 1, "a": 2}` and
    `{ "a":2,"b":1 }` are the same arguments, and must hash alike."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def arguments_hash(arguments: str) -> str:
    """SHA-256 (hex) of the canonical JSON of the arguments the model sent (raw JSON text).
    Text that is not JSON hashes as it is: it can never match a canonical spelling by chance."""
    try:
        canonical = canonical_json(json.loads(arguments or "{}"))
    except (ValueError, RecursionError):
        canonical = arguments
    return hashlib.sha256(canonical.encode("utf-8", "replace")).hexdigest()


def tool_hash(tool: Tool) -> str:
    """SHA-256 (hex) of a tool's definition as the model sees it: its (wire) name, description
    and parameters schema, as canonical JSON. A call that waited for approval runs only if its
    tool still hashes alike: a deploy that changed the tool meanwhile must not run new code on
    arguments a person approved for the old one."""
    definition = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
    try:
        canonical = canonical_json(definition)
    except (TypeError, ValueError, RecursionError):
        # Not plain JSON (NaN, an object): still one spelling per definition, never a crash.
        canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(canonical.encode("utf-8", "replace")).hexdigest()
