"""An MCP server as a tool source of an agent: its tools, listed and cached, become ordinary
`Tool`s, so each call is dispatched, timed out, heartbeaten and recorded like any other."""

import asyncio
import dataclasses
import fnmatch
import logging
import re
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

from toolpipe.shared.errors import DefinitionError
from toolpipe.shared.mcp import client
from toolpipe.shared.mcp.results import result_text
from toolpipe.shared.tools import SchemaError, Tool, assign_wire_names, schema_tool
from toolpipe.shared.tools.errors import ToolExecutionError
from toolpipe.shared.tools.registry import ToolSourceError
from toolpipe.shared.tools.runners import runner_name_problem

# Per server: a model request carries every tool, and APIs refuse more than 128 of them.
MAX_TOOLS_PER_SERVER = 64

logger = logging.getLogger(__name__)

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
# After a failed refresh, the list in hand is used this long before the next try.
STALE_RETRY_SECONDS = 30.0


@dataclass(frozen=True)
class McpServer:
    """An MCP server whose tools an agent offers, each named `<prefix>_<tool>`.

    Give `url` (streamable HTTP, or `transport="sse"`) for a deployed server, or `command` to
    start a local one over stdio for development. Headers that carry credentials come from
    Secrets Manager: `headers_secret_arn` names a secret whose value is a JSON object of
    headers (`{"Authorization": "Bearer ..."}`), read once per cold start; `headers` are for
    the rest. The tool list is fetched when first needed and kept `list_ttl_seconds`.
    """

    name: str
    url: str | None = None
    transport: Literal["streamable-http", "sse"] = "streamable-http"
    command: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    headers_secret_arn: str | None = None
    # Glob patterns on the server's own tool names; exclude wins.
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    # None: the server's name. "": no prefix (names may then clash with the agent's own tools).
    prefix: str | None = None
    # Connecting, the handshake and listing, together; and connecting before a call.
    connect_timeout_seconds: float = 10.0
    # None: the agent's tool_timeout_seconds.
    call_timeout_seconds: float | None = None
    list_ttl_seconds: float = 300.0
    # Calls of idempotent tools (annotated read-only or idempotent) are retried this many times
    # when the connection fails; other tools never are, since a lost answer may hide an effect.
    max_retries: int = 2
    # The server's annotations are hints: False ignores them, and no tool counts as idempotent.
    trust_annotations: bool = True
    # The runner its tools' calls run in (`@tool(runner=...)`): where a grant for the server
    # (its headers secret, say) goes. None: the default runner.
    runner: str | None = None
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    _cache: "_ListCache" = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise DefinitionError(f"MCP server name '{self.name}' must match {_NAME.pattern}")
        if bool(self.url) == bool(self.command):
            raise DefinitionError(f"MCP server '{self.name}': give either url or command")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise DefinitionError(f"MCP server '{self.name}': url must be http(s), not '{self.url}'")
        problem = None if self.runner is None else runner_name_problem(self.runner)
        if problem is not None:
            raise DefinitionError(f"MCP server '{self.name}': {problem}")
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "include", tuple(self.include))
        object.__setattr__(self, "exclude", tuple(self.exclude))
        object.__setattr__(self, "_cache", _ListCache())

    def __hash__(self) -> int:
        return hash((self.name, self.url, self.command))

    @property
    def where(self) -> str:
        return self.url or " ".join(self.command)

    @property
    def tool_prefix(self) -> str:
        prefix = self.name if self.prefix is None else self.prefix
        return f"{prefix}_" if prefix else ""

    # --- ToolSource -----------------------------------------------------------------------

    def tools(self) -> list[Tool]:
        """The server's tools as toolpipe tools, from the cache while it is fresh."""
        with self._cache.lock:
            now = self.clock()
            if self._cache.tools is None or now >= self._cache.expires:
                try:
                    self._cache.tools = self._fetch()
                    self._cache.expires = now + self.list_ttl_seconds
                except ToolSourceError as e:
                    if self._cache.tools is None:
                        raise
                    # A refresh that fails keeps the list it had, so a blip does not end runs
                    # already using these tools (their calls fail one by one if it is down);
                    # it is tried again soon.
                    logger.warning(
                        "MCP tool list kept after a failed refresh",
                        extra={"server": self.name, "reason": str(e)},
                    )
                    self._cache.expires = now + min(self.list_ttl_seconds, STALE_RETRY_SECONDS)
            return self._cache.tools

    def resolve(self, name: str) -> Tool | None:
        """The tool called `name`. When the server cannot be listed, a tool that calls it
        anyway (arguments unchecked, not idempotent), so the call fails as a call, with an
        error result, instead of leaving it undispatched until its timeout."""
        try:
            return next((t for t in self.tools() if name in (t.name, t.source_name)), None)
        except ToolSourceError:
            if not self.tool_prefix or not name.startswith(self.tool_prefix):
                return None
            return self._tool(name.removeprefix(self.tool_prefix), "", {"type": "object"}, idempotent=False)

    # --- listing --------------------------------------------------------------------------

    def _fetch(self) -> list[Tool]:
        try:
            listed = run_sync(client.list_tools(self, self._headers(), self.connect_timeout_seconds))
        except TimeoutError as e:
            raise ToolSourceError(
                f"MCP server '{self.name}' at {self.where} did not list its tools within "
                f"{self.connect_timeout_seconds:g} s"
            ) from e
        except ToolSourceError:
            raise
        except Exception as e:
            raise ToolSourceError(
                f"MCP server '{self.name}' at {self.where} {client.describe_failure(e)}"
            ) from e
        tools: list[Tool] = []
        names: set[str] = set()
        for remote in listed:
            if not self._wanted(remote.name):
                continue
            if len(tools) >= MAX_TOOLS_PER_SERVER:
                # Chat Completions APIs refuse more than 128 tools in a request: the first ones are kept.
                logger.warning("MCP tools past the limit skipped", extra={"server": self.name})
                break
            hints = remote.annotations if self.trust_annotations else None
            idempotent = bool(hints and (hints.read_only_hint or hints.idempotent_hint))
            description = remote.description or remote.title or f"The '{remote.name}' tool of {self.name}."
            try:
                built = self._tool(remote.name, description, remote.input_schema, idempotent)
            except SchemaError as e:
                # One malformed remote tool must not take the server's other tools away.
                logger.warning(
                    "MCP tool skipped", extra={"server": self.name, "tool": remote.name, "reason": str(e)}
                )
                continue
            if remote.name in names:
                logger.warning(
                    "MCP tool skipped: listed twice", extra={"server": self.name, "tool": remote.name}
                )
                continue
            names.add(remote.name)
            tools.append(built)
        # Names that map to one wire name (`a.b`, `a_b`) all stay, told apart as names.py says.
        try:
            wire = assign_wire_names(t.source_name or t.name for t in tools)
        except DefinitionError as e:
            raise ToolSourceError(f"MCP server '{self.name}': {e}") from e
        return [dataclasses.replace(t, name=wire[t.source_name or t.name]) for t in tools]

    def _wanted(self, name: str) -> bool:
        if self.include and not any(fnmatch.fnmatchcase(name, p) for p in self.include):
            return False
        return not any(fnmatch.fnmatchcase(name, p) for p in self.exclude)

    def _headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        if self.headers_secret_arn:
            from aws_lambda_powertools.utilities import parameters

            try:
                # Cached by Powertools for the life of the execution environment.
                secret = parameters.get_secret(self.headers_secret_arn, transform="json", max_age=3600)
            except Exception as e:
                raise ToolSourceError(
                    f"MCP server '{self.name}': cannot read its headers secret: {type(e).__name__}"
                ) from e
            if not isinstance(secret, dict) or not all(isinstance(v, str) for v in secret.values()):
                raise ToolSourceError(
                    f"MCP server '{self.name}': its headers secret must be a JSON object of strings"
                )
            headers.update(secret)
        return headers

    def _tool(self, remote_name: str, description: str, schema: dict[str, Any], idempotent: bool) -> Tool:
        server = self

        async def call(arguments: dict[str, Any]) -> str:
            try:
                result = await client.call_tool(
                    server, server._headers(), remote_name, arguments, server.connect_timeout_seconds
                )
            except client.McpProtocolError as e:
                raise ToolExecutionError(str(e)) from e
            text = result_text(result.content, result.structured_content)
            if result.is_error:
                raise ToolExecutionError(text)  # the server's own words: the model can act on them
            return text

        return schema_tool(
            {
                "name": f"{self.tool_prefix}{remote_name}",
                "description": description or f"Call {remote_name}.",
                "parameters": schema,
            },
            call,
            timeout_seconds=self.call_timeout_seconds,
            idempotent=idempotent,
            retry_on=(client.McpTransportError,) if idempotent and self.max_retries else (),
            max_retries=self.max_retries if idempotent else 0,
            runner=self.runner,
        )


@dataclass
class _ListCache:
    lock: threading.Lock = field(default_factory=threading.Lock)
    tools: list[Tool] | None = None
    expires: float = 0.0


def run_sync(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine from sync code, also where an event loop already runs in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(("ok", asyncio.run(coroutine)))
        except BaseException as e:  # handed to the caller's thread below
            outcome.append(("error", e))

    thread = threading.Thread(target=target, name="mcp-sync")
    thread.start()
    thread.join()
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value
