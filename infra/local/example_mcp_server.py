"""An example MCP server, to try MCP tool sources locally and to test them against a real server.

    python -m infra.local.example_mcp_server --port 8765          # streamable HTTP on /mcp
    python -m infra.local.example_mcp_server --transport sse      # SSE on /sse
    python -m infra.local.example_mcp_server --transport stdio    # for `McpServer(command=[...])`

With `--token T` (HTTP transports), every request must carry `Authorization: Bearer T`, as a
deployed server behind a gateway would demand; the header then comes from Secrets Manager.

Besides well-behaved tools it has the misbehaviours MCP clients meet in practice, so the
pipeline's answers to them are tested against a real server process: `stall` accepts the
call and never answers, `crash` kills the process mid-call (the connection drops), `fail`
answers with `isError`.
"""

import argparse
import asyncio
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import EmbeddedResource, ResourceLink, TextContent, TextResourceContents, ToolAnnotations

server = MCPServer(name="example", instructions="Example tools for toolpipe's MCP tests.")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: float, b: float) -> dict[str, float]:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return {"sum": a + b}


@server.tool()
def echo(text: str) -> str:
    """Repeat a text back.

    Args:
        text: What to repeat.
    """
    return text


@server.tool()
def fail(reason: str) -> str:
    """Fail on purpose with the given reason.

    Args:
        reason: The message of the failure.
    """
    raise ToolError(reason)


@server.tool()
async def stall(seconds: float = 3600) -> str:
    """Accept the call and answer only after a long time.

    Args:
        seconds: How long to wait before answering.
    """
    await asyncio.sleep(seconds)
    return "finally"


@server.tool()
def crash() -> str:
    """Kill the server process mid-call, so the connection drops without an answer."""
    sys.stdout.flush()
    os._exit(3)


@server.tool()
def document(topic: str) -> list[Any]:
    """Return a document about a topic, as an embedded resource with a link to more.

    Args:
        topic: What the document is about.
    """
    return [
        TextContent(type="text", text=f"Notes on {topic}:"),
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri=f"notes://{topic}", mime_type="text/markdown", text=f"# {topic}\nAll about {topic}."
            ),
        ),
        ResourceLink(type="resource_link", uri=f"notes://{topic}/more", name=f"{topic}-more"),
    ]


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def big(kilobytes: int) -> str:
    """Return a large text.

    Args:
        kilobytes: How many KB of text.
    """
    return "y" * (kilobytes * 1000)


class _RequireBearer:
    """ASGI middleware: refuses requests without `Authorization: Bearer <token>` (401)."""

    def __init__(self, app: Any, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope.get("headers", [])).get(b"authorization") != self._expected:
            await send(
                {"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]}
            )
            await send({"type": "http.response.body", "body": b"missing or wrong bearer token"})
            return
        await self._app(scope, receive, send)


def _crowd() -> None:
    """What sloppy servers list: more tools than a model request may carry, and names that
    differ only in characters a wire name cannot hold."""

    def answering(text: str) -> Callable[[], str]:
        def answer() -> str:
            return text

        return answer

    for n in range(100):
        server.add_tool(answering(f"filler {n}"), name=f"filler_{n:03d}", description=f"Filler tool {n}.")
    server.add_tool(answering("dotted"), name="dup.name", description="A dotted name.")
    server.add_tool(answering("underscored"), name="dup_name", description="The same name, underscored.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="toolpipe's example MCP server")
    parser.add_argument("--transport", choices=["streamable-http", "sse", "stdio"], default="streamable-http")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--token", help="require this bearer token on every HTTP request")
    parser.add_argument(
        "--crowded",
        action="store_true",
        help="also list 100 filler tools and two names that map to one wire name (a sloppy server)",
    )
    args = parser.parse_args(argv)
    if args.crowded:
        _crowd()
    if args.transport == "stdio":
        server.run("stdio")
        return
    import uvicorn

    app: Any = (
        server.streamable_http_app(host=args.host)
        if args.transport == "streamable-http"
        else server.sse_app(host=args.host)
    )
    if args.token:
        app = _RequireBearer(app, args.token)
    # Bound before serving, so the address printed is already accepting connections (they wait
    # in the backlog until uvicorn takes them): a caller reads one line instead of polling.
    sock = socket.create_server((args.host, args.port))
    path = "/mcp" if args.transport == "streamable-http" else "/sse"
    print(f"listening on http://{args.host}:{sock.getsockname()[1]}{path}", flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    main()
