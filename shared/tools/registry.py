"""The set of tools one agent offers, and the execution of one call against it."""

import dataclasses
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from toolpipe.shared.errors import DefinitionError, ErrorKind, ModelVisibleError, ToolpipeError, error_text
from toolpipe.shared.messages import ToolCall
from toolpipe.shared.tools.context import ToolContext
from toolpipe.shared.tools.errors import ToolNotAllowedError, UnknownToolError
from toolpipe.shared.tools.names import assign_wire_names
from toolpipe.shared.tools.tool import Tool


@dataclass(frozen=True)
class Execution:
    content: str
    status: Literal["ok", "error"]
    duration_ms: int
    error_type: ErrorKind | None = None  # why it failed, for policies and reports

    @classmethod
    def failed(cls, kind: ErrorKind, message: str, duration_ms: int = 0) -> "Execution":
        """A failed call's outcome, for `kind`: the model reads `Error: <message>`."""
        return cls(error_text(message), "error", duration_ms, kind)


class ToolSourceError(ToolpipeError):
    """A tool source (an MCP server) could not give its tools: the run cannot offer them."""


class ToolSource(Protocol):
    """Tools known only at run time (an MCP server's), listed when needed and cached."""

    @property
    def name(self) -> str:
        """Unique among an agent's sources; names its tools' prefix."""
        ...

    def tools(self) -> list[Tool]:
        """Every tool of the source; raises `ToolSourceError` when it cannot be listed."""
        ...

    def resolve(self, name: str) -> Tool | None:
        """The tool called `name` (wire or source name), or None when the source has none."""
        ...


class ToolRegistry:
    def __init__(
        self,
        tools: Iterable[Tool],
        default_timeout_seconds: float | None = None,
        sources: Sequence[ToolSource] = (),
    ) -> None:
        self._default_timeout = default_timeout_seconds
        self._sources = list(sources)
        given: dict[str, Tool] = {}
        for t in tools:
            if _original(t) in given:
                raise DefinitionError(f"two tools are named '{_original(t)}'")
            given[_original(t)] = t
        # Distinct names can still meet on the wire (`flight.book`, `flight_book`): see names.py.
        wire = assign_wire_names(given)
        self._static: dict[str, Tool] = {
            wire[n]: self._with_default(_renamed(t, wire[n])) for n, t in given.items()
        }

    def _with_default(self, t: Tool) -> Tool:
        if t.timeout_seconds is None and self._default_timeout is not None:
            return dataclasses.replace(t, timeout_seconds=self._default_timeout)
        return t

    def _tools(self) -> dict[str, Tool]:
        """The agent's own tools and every source's: listing a source may raise ToolSourceError."""
        if not self._sources:
            return self._static
        tools = dict(self._static)
        for source in self._sources:
            tools.update(self._named(source, tools))
        return tools

    def _named(self, source: ToolSource, taken: dict[str, Tool]) -> dict[str, Tool]:
        """A source's tools under wire names apart from `taken`. The agent's own tools (and
        earlier sources') keep theirs: a server listing a new tool never renames them."""
        listed = {t.name: t for t in source.tools()}
        clashing = [name for name in listed if name in taken]
        try:
            wire = assign_wire_names([_original(listed[n]) for n in clashing], [*taken, *listed])
        except DefinitionError as e:
            raise ToolSourceError(f"tool source '{source.name}': {e}") from e
        renamed = {n: wire[_original(listed[n])] for n in clashing}
        return {
            renamed.get(n, n): self._with_default(_renamed(t, renamed.get(n, n))) for n, t in listed.items()
        }

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self.get(name)
        except UnknownToolError:
            return False
        return True

    @property
    def static_names(self) -> list[str]:
        """The wire names of the agent's own tools (not its sources', listed at run time)."""
        return list(self._static)

    @property
    def names(self) -> list[str]:
        return list(self._tools())

    def specs(self, only: Iterable[str] | None = None) -> list[dict[str, Any]]:
        allowed = None if only is None else set(only)
        return [t.spec() for t in self._tools().values() if allowed is None or t.name in allowed]

    def get(self, name: str) -> Tool:
        """The tool called `name`. Sources are asked one by one, so a source that is down
        cannot hide the agent's own tools or another source's."""
        found = _find(self._static, name)
        if found is None and self._sources:
            try:
                found = _find(self._tools(), name)
            except ToolSourceError:
                # A source that is down: ask each source in turn, so it cannot hide the others.
                for source in self._sources:
                    found = found or source.resolve(name)
        if found is None:
            raise UnknownToolError(name)
        return self._with_default(found)

    def execute(
        self,
        call: ToolCall,
        context: ToolContext | None = None,
        allowed: Iterable[str] | None = None,
        time_limit: float | None = None,
    ) -> Execution:
        """Run one call. Errors the model can act on become an error result, never a crash.
        `allowed`, when given, is the run's tool set: anything else is refused. `time_limit`:
        the seconds the caller can wait (see `Tool.invoke`)."""
        started = time.perf_counter()
        try:
            tool = self.get(call.name)
            if allowed is not None and tool.name not in set(allowed):
                raise ToolNotAllowedError(call.name)
            content = tool.invoke(call.arguments, context, time_limit=time_limit)
        except ModelVisibleError as e:
            # A tool's own subclass may name a kind of its own: policies match on ours only.
            kind = e.kind if e.kind in set(ErrorKind) else ErrorKind.TOOL_FAILED
            return Execution.failed(ErrorKind(kind), str(e), _ms_since(started))
        return Execution(content, "ok", _ms_since(started))


def _original(t: Tool) -> str:
    return t.source_name or t.name


def _renamed(t: Tool, name: str) -> Tool:
    return t if t.name == name else dataclasses.replace(t, name=name, source_name=_original(t))


def _find(tools: dict[str, Tool], name: str) -> Tool | None:
    # A model may echo a tool's original name (dots, spaces) instead of its wire name.
    return tools.get(name) or next((t for t in tools.values() if t.source_name == name), None)


def _ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)
