"""The checks a deferred call's decision or answer passes before anything is recorded: arguments
a person edited (checked as the model step checks a model's), and whether the call's tool
changed (a deploy) while the call waited. They read; they write nothing."""

import json
from collections.abc import Callable
from typing import Any

from toolpipe.shared.agents import Agent
from toolpipe.shared.deferred.hashing import arguments_hash, canonical_json, tool_hash
from toolpipe.shared.deferred.models import (
    MAX_EDITED_ARGUMENTS_BYTES,
    Approval,
    EditedArguments,
    InvalidEditError,
)
from toolpipe.shared.errors import ModelVisibleError
from toolpipe.shared.messages import ToolCall
from toolpipe.shared.tools import Tool
from toolpipe.shared.tools.errors import UnknownToolError


def edited_arguments(
    approval: Approval, agent: Agent, text: str, model_call: Callable[[], ToolCall | None]
) -> EditedArguments | None:
    """Arguments a person wrote for `agent`'s call, checked: JSON, an object, at most 64 KiB,
    and passing the tool's own validation (else `InvalidEditError`). None when they are the
    model's arguments after all (no edit to record or tell the model about). `model_call`: the
    call as the model made it, read only when needed."""
    if len(text.encode("utf-8", "replace")) > MAX_EDITED_ARGUMENTS_BYTES:
        raise InvalidEditError(f"the arguments are larger than {MAX_EDITED_ARGUMENTS_BYTES // 1024} KiB")
    try:
        raw = json.loads(text)
        canonical = canonical_json(raw)
    except (ValueError, RecursionError) as e:
        raise InvalidEditError(f"the arguments are not valid JSON: {one_line(str(e))}") from e
    if not isinstance(raw, dict):
        raise InvalidEditError("the arguments must be a JSON object")
    try:
        canonical.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (`"\ud800"`): no tool could be given it, and no store keeps it.
        raise InvalidEditError(
            "the arguments hold text that is not valid Unicode (a lone surrogate)"
        ) from None
    try:
        tool = agent.registry.get(approval.tool)
        parsed = tool.parse_arguments(canonical)
    except ModelVisibleError as e:
        raise InvalidEditError(one_line(str(e))) from e
    sha256 = arguments_hash(canonical)
    if sha256 == approval.link_arguments_sha256 or _same_as_model(tool, parsed, model_call()):
        return None
    return EditedArguments(text=canonical, sha256=sha256)


def _same_as_model(tool: Tool, parsed: dict[str, Any], call: ToolCall | None) -> bool:
    """Arguments that the tool's validation makes equal to the model's (`250.0` for `250`):
    the call would run the same, so no edit to record or tell the model about."""
    try:
        return call is not None and tool.parse_arguments(call.arguments) == parsed
    except ModelVisibleError:
        return False


def tool_changed(agent: Agent, approval: Approval) -> bool:
    """The call's tool is gone from `agent`, or is not the one the model saw when it called."""
    if approval.tool_sha256 is None:
        return False
    try:
        tool = agent.registry.get(approval.tool)
    except UnknownToolError:
        return True
    return tool_hash(tool) != approval.tool_sha256


def one_line(text: str) -> str:
    return " ".join(text.split())[:300]
