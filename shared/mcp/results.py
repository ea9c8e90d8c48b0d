"""What the model reads of an MCP tool result: text, structured content and resources."""

import json
from typing import Any


def result_text(content: list[Any], structured: dict[str, Any] | None) -> str:
    """One text for the model from a `CallToolResult`'s `content` and `structured_content`.

    Structured content alone, or repeated as JSON text (as the spec asks servers to), is given
    as compact JSON; text that says something else (a server that wraps a plain string as
    `{"result": ...}` still sends the string) is kept as sent. Otherwise each block is converted in
    order (text as is, an embedded text resource with its URI, binary contents and links
    described, never inlined as base64). Long results need no care here: the worker stores
    whatever passes the agent's `max_result_chars` in S3 and shows the model a preview.
    """
    if structured is not None and (not content or _repeats(content, structured)):
        return json.dumps(structured, ensure_ascii=False)
    parts = [_block_text(block) for block in content]
    return "\n\n".join(part for part in parts if part) or "Success"


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind == "resource":
        resource = block.resource
        mime = f" ({resource.mime_type})" if resource.mime_type else ""
        text = getattr(resource, "text", None)
        if text is not None:
            return f"[resource {resource.uri}{mime}]\n{text}"
        size = _decoded_size(getattr(resource, "blob", "") or "")
        return f"[resource {resource.uri}{mime}: {size} bytes of binary content, not shown]"
    if kind == "resource_link":
        described = f": {block.description}" if block.description else ""
        return f"[resource link {block.uri} ({block.name}){described}]"
    if kind in ("image", "audio"):
        size = _decoded_size(block.data or "")
        return f"[{kind} ({block.mime_type}): {size} bytes, not shown]"
    return f"[{kind or 'unknown'} content, not shown]"


def _repeats(content: list[Any], structured: dict[str, Any]) -> bool:
    if len(content) != 1 or getattr(content[0], "type", None) != "text":
        return False
    try:
        return bool(json.loads(content[0].text) == structured)
    except ValueError:
        return False


def _decoded_size(data: str) -> int:
    """Bytes a base64 text holds, without decoding it."""
    return len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))
