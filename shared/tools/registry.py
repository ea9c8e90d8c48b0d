"""The set of tools one agent offers, and the execution of one call against it."""

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from shared.errors import ModelVisibleError, UnknownToolError
from shared.messages import ToolCall
from shared.tools.tool import Tool


@dataclass(frozen=True)
class Execution:
    content: str
    status: Literal["ok", "error"]
    duration_ms: int


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in self._tools:
                raise ValueError(f"two tools are named '{t.name}'")
            self._tools[t.name] = t

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        return [t.spec() for t in self._tools.values()]

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name) from None

    def execute(self, call: ToolCall) -> Execution:
        """Run one call. Errors the model can act on become an error result, never a crash."""
        started = time.perf_counter()
        try:
            content, status = self.get(call.name).invoke(call.arguments), "ok"
        except ModelVisibleError as e:
            content, status = f"Error: {e}", "error"
        duration_ms = round((time.perf_counter() - started) * 1000)
        return Execution(content=content, status=status, duration_ms=duration_ms)  # type: ignore[arg-type]
