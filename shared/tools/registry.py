"""The set of tools one agent offers, and the execution of one call against it."""

import dataclasses
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from shared.errors import DefinitionError, ErrorKind, ModelVisibleError, ToolNotAllowedError, UnknownToolError
from shared.messages import ToolCall
from shared.tools.context import ToolContext
from shared.tools.tool import Tool


@dataclass(frozen=True)
class Execution:
    content: str
    status: Literal["ok", "error"]
    duration_ms: int
    error_type: ErrorKind | None = None  # why it failed, for policies and reports


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool], default_timeout_seconds: float | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in self._tools:
                raise DefinitionError(f"two tools are named '{t.name}'")
            if t.timeout_seconds is None and default_timeout_seconds is not None:
                t = dataclasses.replace(t, timeout_seconds=default_timeout_seconds)
            self._tools[t.name] = t

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self, only: Iterable[str] | None = None) -> list[dict[str, Any]]:
        allowed = None if only is None else set(only)
        return [t.spec() for t in self._tools.values() if allowed is None or t.name in allowed]

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            pass
        # A model may echo a schema tool's original name (dots, spaces) instead of its wire name.
        for t in self._tools.values():
            if t.source_name == name:
                return t
        raise UnknownToolError(name)

    def execute(
        self, call: ToolCall, context: ToolContext | None = None, allowed: Iterable[str] | None = None
    ) -> Execution:
        """Run one call. Errors the model can act on become an error result, never a crash.
        `allowed`, when given, is the run's tool set: anything else is refused."""
        started = time.perf_counter()
        try:
            tool = self.get(call.name)
            if allowed is not None and tool.name not in set(allowed):
                raise ToolNotAllowedError(call.name)
            content = tool.invoke(call.arguments, context)
        except ModelVisibleError as e:
            return Execution(f"Error: {e}", "error", _ms_since(started), e.kind)
        return Execution(content, "ok", _ms_since(started))


def _ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)
