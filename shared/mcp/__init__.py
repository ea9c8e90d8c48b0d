"""MCP servers as tool sources: `Agent(tool_sources=[McpServer("docs", url=...)])`."""

from toolpipe.shared.mcp.client import McpProtocolError, McpTransportError
from toolpipe.shared.mcp.server import McpServer

__all__ = ["McpProtocolError", "McpServer", "McpTransportError"]
