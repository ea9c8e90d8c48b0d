"""Talking to one MCP server: connect, list its tools, call one. Every step is bounded.

The SDK is imported here only, so agents without MCP servers never pay for it at cold start.
A session lives for one listing or one call: a tool call is its own Lambda invocation, so
there is no connection worth keeping, and none left half-open when an invocation is frozen.
"""

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from toolpipe.shared.errors import ToolpipeError

# The SDK logs expected ends (a cancelled call, a dropped stream) with tracebacks; with no
# handler configured, Python would print them to stderr. Applications that configure logging
# still see them.
logging.getLogger("mcp").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from mcp import Client

    from toolpipe.shared.mcp.server import McpServer


class McpTransportError(ConnectionError, ToolpipeError):
    """The server could not be reached, or dropped the connection before it answered."""


class McpProtocolError(ToolpipeError):
    """The server answered with a JSON-RPC error instead of a result."""


@asynccontextmanager
async def connect(server: "McpServer", headers: dict[str, str], timeout: float) -> AsyncIterator["Client"]:
    """An initialised session; `timeout` bounds each HTTP operation (a call adds its own)."""
    from mcp import Client

    transport: Any
    if server.command:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        parameters = StdioServerParameters(
            command=server.command[0], args=list(server.command[1:]), env=dict(server.env) or None
        )
        transport = stdio_client(parameters)
    elif server.transport == "sse":
        from mcp.client.sse import sse_client

        assert server.url is not None
        transport = sse_client(server.url, headers=headers, timeout=timeout)
    else:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert server.url is not None
        http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout, read=None))
        transport = streamable_http_client(server.url, http_client=http)
        async with http, Client(transport, mode="legacy", cache=None) as client:
            yield client
        return
    async with Client(transport, mode="legacy", cache=None) as client:
        yield client


async def list_tools(server: "McpServer", headers: dict[str, str], timeout: float) -> list[Any]:
    """Every tool the server lists (following pages), within `timeout` in all."""
    import anyio

    tools: list[Any] = []
    with anyio.fail_after(timeout):
        async with connect(server, headers, timeout) as client:
            cursor: str | None = None
            for _ in range(100):  # a server that pages forever is cut off, not followed
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
    return tools


async def call_tool(
    server: "McpServer", headers: dict[str, str], name: str, arguments: dict[str, Any], connect_timeout: float
) -> Any:
    """The `CallToolResult`. Not bounded here: the tool's timeout cancels it (see `Tool._run`)."""
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED

    try:
        async with connect(server, headers, connect_timeout) as client:
            return await client.call_tool(name, arguments)
    except TimeoutError:
        raise  # the tool's own deadline: answered as a timeout
    except Exception as e:
        leaves = _leaves(e)
        refused = next(
            (x for x in leaves if isinstance(x, MCPError) and x.error.code != CONNECTION_CLOSED), None
        )
        if refused is not None:
            message = refused.error.message
            raise McpProtocolError(f"MCP server '{server.name}' refused the call: {message}") from e
        if any(_is_transport_error(x) for x in leaves):
            raise McpTransportError(f"MCP server '{server.name}' {describe_failure(e)}") from e
        raise


def _is_transport_error(error: BaseException) -> bool:
    import httpx2
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED

    if isinstance(error, MCPError):
        return error.error.code == CONNECTION_CLOSED
    return isinstance(error, OSError | httpx2.TransportError | httpx2.HTTPStatusError)


def describe_failure(error: BaseException) -> str:
    """What went wrong, in words, from whatever the SDK and httpx raised (often a group)."""
    import httpx2
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED

    leaves = _leaves(error)
    for leaf in leaves:
        if isinstance(leaf, MCPError):
            if leaf.error.code == CONNECTION_CLOSED:
                return "dropped the connection before answering"
            # The SDK drops a non-2xx HTTP status (401, 503...) for a generic message.
            return f"answered with an error: {leaf.error.message}"
        if isinstance(leaf, httpx2.ConnectError | ConnectionRefusedError):
            return "is not reachable (connection refused)"
        if isinstance(leaf, httpx2.HTTPStatusError):
            return f"answered HTTP {leaf.response.status_code}"
        if isinstance(leaf, httpx2.RemoteProtocolError | httpx2.ReadError | ConnectionResetError):
            return "dropped the connection before answering"
        if isinstance(leaf, TimeoutError | httpx2.TimeoutException):
            return "did not answer in time"
    first = leaves[0] if leaves else error
    return f"failed: {type(first).__name__}: {first}"


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for sub in error.exceptions for leaf in _leaves(sub)]
    found = [error]
    if error.__cause__ is not None:
        found += _leaves(error.__cause__)
    return found
