"""An MCP server as a tool source, against the example server in a real process (HTTP, SSE, stdio)."""

import base64
import dataclasses
import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.mcp_server import example_server
from toolpipe.shared.errors import DefinitionError
from toolpipe.shared.mcp import McpServer
from toolpipe.shared.mcp.results import result_text
from toolpipe.shared.messages import ToolCall
from toolpipe.shared.tools import ToolRegistry, ToolSourceError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with example_server() as served:
        yield served


def _run(registry: ToolRegistry, name: str, **arguments: Any) -> tuple[str, str]:
    execution = registry.execute(ToolCall(id="c", name=name, arguments=json.dumps(arguments)))
    return execution.status, execution.content


def test_tools_are_prefixed_filtered_and_keep_the_servers_schema(url: str) -> None:
    server = McpServer("ex", url=url, include=("a*", "echo", "big"), exclude=("big",))

    tools = {t.name: t for t in server.tools()}

    assert set(tools) == {"ex_add", "ex_echo"}
    assert tools["ex_add"].parameters["properties"]["a"] == {"title": "A", "type": "number"}
    assert tools["ex_add"].description.startswith("Add two numbers.")  # the server's own words
    # read_only_hint: safe to run again; echo declares nothing, so it is not.
    assert (tools["ex_add"].idempotent, tools["ex_echo"].idempotent) == (True, False)
    assert McpServer("ex", url=url, trust_annotations=False).tools()[0].idempotent is False
    assert {t.name for t in McpServer("ex", url=url, prefix="").tools()} >= {"add", "echo"}


def test_arguments_are_checked_against_the_servers_schema_before_the_call(url: str) -> None:
    registry = ToolRegistry([], 5, [McpServer("ex", url=url)])

    status, content = _run(registry, "ex_add", a="two", b=1)

    assert status == "error"
    assert content.startswith("Error: Invalid arguments for 'ex_add': a: 'two' is not of type 'number'")


def test_the_list_is_cached_for_its_ttl_and_kept_when_a_refresh_fails() -> None:
    now = [0.0]
    with example_server() as served:
        server = McpServer("ex", url=served, list_ttl_seconds=60, clock=lambda: now[0])
        first = server.tools()
    now[0] = 59.0
    assert server.tools() is first  # the server is gone: this came from the cache
    now[0] = 60.0
    assert server.tools() is first  # the refresh failed: runs using these tools go on
    with pytest.raises(ToolSourceError, match="is not reachable"):
        McpServer("ex", url=served).tools()  # a cold start has nothing to fall back on


def test_a_stalled_listing_is_cut_off_at_the_connect_timeout() -> None:
    import socket
    import time

    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        server = McpServer(
            "ex", url=f"http://127.0.0.1:{silent.getsockname()[1]}/mcp", connect_timeout_seconds=1
        )
        started = time.monotonic()
        with pytest.raises(ToolSourceError, match="did not list its tools within 1 s"):
            server.tools()
    assert time.monotonic() - started < 8  # not the 10 s default


def test_only_idempotent_tools_are_retried_when_the_connection_fails() -> None:
    with example_server() as served:
        server = McpServer("ex", url=served, max_retries=2)
        server.tools()  # listed while up; the server is gone for the calls
    waits: list[float] = []
    add = dataclasses.replace(server.resolve("ex_add"), sleep=waits.append)  # type: ignore[arg-type]
    echo = dataclasses.replace(server.resolve("ex_echo"), sleep=waits.append)  # type: ignore[arg-type]

    status, retried = _run(ToolRegistry([add], 5), "ex_add", a=1, b=2)
    assert status == "error" and "failed after 3 attempts: McpTransportError" in retried
    assert waits == [0.5, 1.0]

    status, once = _run(ToolRegistry([echo], 5), "ex_echo", text="x")
    assert status == "error" and once.startswith("Error: Tool 'ex_echo' failed: McpTransportError: ")
    assert "is not reachable (connection refused)" in once
    assert waits == [0.5, 1.0]  # no retry: a lost answer of a non-idempotent tool may hide an effect


def test_a_call_still_runs_when_the_worker_cannot_list_the_server() -> None:
    with example_server() as served:
        port = served.split(":")[2].split("/")[0]
    registry = ToolRegistry([], 5, [McpServer("ex", url=f"http://127.0.0.1:{port}/mcp")])

    status, content = _run(registry, "ex_echo", text="x")  # the call is answered, not left hanging

    assert status == "error" and "is not reachable" in content
    with pytest.raises(ToolSourceError):
        registry.specs()  # but the model is never offered tools that cannot be listed


def test_headers_come_from_secrets_manager_by_arn() -> None:
    with example_server("--token", "s3cret") as served, mock_aws():
        arn = boto3.client("secretsmanager").create_secret(
            Name="mcp-headers", SecretString=json.dumps({"Authorization": "Bearer s3cret"})
        )["ARN"]
        with pytest.raises(
            ToolSourceError, match="answered with an error: Server returned an error response"
        ):
            McpServer("ex", url=served).tools()
        registry = ToolRegistry([], 5, [McpServer("ex", url=served, headers_secret_arn=arn)])

        assert "ex_add" in registry.names
        assert _run(registry, "ex_echo", text="authorised") == ("ok", "authorised")


def test_sse_and_stdio_servers() -> None:
    with example_server("--transport", "sse") as served:
        sse = ToolRegistry([], 5, [McpServer("ex", url=served, transport="sse")])
        assert _run(sse, "ex_echo", text="over sse") == ("ok", "over sse")
    command = (sys.executable, "-m", "toolpipe.infra.local.example_mcp_server", "--transport", "stdio")
    stdio = ToolRegistry([], 10, [McpServer("ex", command=command, env={"PYTHONPATH": str(ROOT)})])
    assert _run(stdio, "ex_add", a=1, b=2) == ("ok", '{"sum": 3.0}')


def test_server_definitions_are_checked_when_defined() -> None:
    with pytest.raises(DefinitionError, match="either url or command"):
        McpServer("ex")
    with pytest.raises(DefinitionError, match="must be http"):
        McpServer("ex", url="file:///etc/passwd")
    with pytest.raises(DefinitionError, match="must match"):
        McpServer("a b", url="http://127.0.0.1/mcp")


def test_contents_are_converted_for_the_model() -> None:
    def block(**fields: Any) -> SimpleNamespace:
        return SimpleNamespace(**fields)

    png = base64.b64encode(b"\x89PNG" + b"0" * 96).decode()
    content = [
        block(type="text", text="Here:"),
        block(type="image", data=png, mime_type="image/png"),
        block(type="resource", resource=block(uri="file:///a.bin", mime_type=None, blob=png)),
    ]

    assert result_text(content, None) == (
        "Here:\n\n[image (image/png): 100 bytes, not shown]\n\n"
        "[resource file:///a.bin: 100 bytes of binary content, not shown]"
    )
    assert result_text([], {"rows": 2}) == '{"rows": 2}'
    assert result_text([block(type="text", text='{\n "rows": 2\n}')], {"rows": 2}) == '{"rows": 2}'
    assert result_text([block(type="text", text="hi")], {"result": "hi"}) == "hi"
    assert result_text([], None) == "Success"


def test_a_crowded_server_gives_a_bounded_list_with_unique_names() -> None:
    """A sloppy server: 100 filler tools beside its own, and `dup.name` beside `dup_name`."""
    from toolpipe.shared.mcp.server import MAX_TOOLS_PER_SERVER

    with example_server("--crowded") as crowded:
        tools = McpServer("c", url=crowded).tools()
        dups = ToolRegistry([], sources=[McpServer("c", url=crowded, include=("dup*",))])
        # Both stay: the name the API accepts as written keeps it, the dotted one is hashed.
        hashed = "c_dup_name_" + hashlib.sha256(b"c_dup.name").hexdigest()[:8]
        assert sorted(dups.names) == ["c_dup_name", hashed]
        assert [_run(dups, name) for name in ("c_dup_name", hashed, "c_dup.name")] == [
            ("ok", "underscored"),
            ("ok", "dotted"),
            ("ok", "dotted"),
        ]

    names = [t.name for t in tools]
    assert len(names) == MAX_TOOLS_PER_SERVER == len(set(names))
