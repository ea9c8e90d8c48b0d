from toolpipe import Agent, McpServer

docs = Agent(
    name="docs",
    instructions="You answer from our documentation.",
    tool_sources=[
        # Deployed: streamable HTTP (transport="sse" for older servers). The headers, with the
        # credentials, come from a Secrets Manager secret: {"Authorization": "Bearer ..."}.
        McpServer(
            "docs",  # its tools are offered as docs_<tool>
            url="https://mcp.example.com/mcp",
            headers_secret_arn="arn:aws:secretsmanager:eu-west-1:123456789012:secret:docs-mcp",
            include=("search*", "read_page"),  # or exclude=(...): glob patterns on the server's names
            call_timeout_seconds=30,  # default: the agent's tool_timeout_seconds
        ),
        # Local development: a server started over stdio for each listing and each call.
        McpServer(
            "example",
            command=("python", "-m", "toolpipe.infra.local.example_mcp_server", "--transport", "stdio"),
        ),
    ],
)
