"""Which runner a tool's code runs in (issue 32, item 3): named where the tool is written, as
`@tool(runner=...)`, on a JSON-schema tool or on an MCP server for all its tools; a name that
cannot name a Lambda function is one line naming the tool."""

import re

import pytest

from toolpipe.shared.agents import agent_tool
from toolpipe.shared.errors import ConfigurationError, DefinitionError
from toolpipe.shared.mcp import McpServer
from toolpipe.shared.settings import ToolRunnerSettings
from toolpipe.shared.tools import schema_tool, tool


def _send(to: str) -> str:
    """Send a mail.

    Args:
        to: The address.
    """
    return to


def test_a_tool_names_its_runner_or_runs_in_the_default_one() -> None:
    assert tool(runner="mail")(_send).runner == "mail"
    assert tool(_send).runner is None
    assert (
        schema_tool({"properties": {}}, lambda a: "ok", name="s", description="S.", runner="mail").runner
        == "mail"
    )
    assert agent_tool("helper").runner is None  # a child run: no runner runs its code


@pytest.mark.parametrize(
    ("runner", "why"),
    [
        (
            "Mail",
            "runner must be 1-20 lowercase letters and digits, a letter first (it names a Lambda function), not 'Mail'",
        ),
        ("mail_box", "runner must be 1-20 lowercase letters and digits"),
        ("", "runner must be 1-20 lowercase letters and digits"),
        ("m" * 21, "runner must be 1-20 lowercase letters and digits"),
        (
            3,
            "runner must be 1-20 lowercase letters and digits, a letter first (it names a Lambda function), not 3",
        ),
        ("default", "runner 'default' is where tools that name none run: leave runner unset"),
    ],
)
def test_a_runner_that_cannot_name_a_function_is_refused_naming_the_tool(runner: object, why: str) -> None:
    with pytest.raises(DefinitionError, match=re.escape(f"tool '_send': {why}")) as refused:
        tool(runner=runner)(_send)
    assert "\n" not in str(refused.value)


def test_a_tool_that_runs_no_code_names_no_runner() -> None:
    with pytest.raises(DefinitionError, match="a deferred tool or an agent tool runs none"):
        tool(runner="mail", deferred="human")(_send)


def test_an_mcp_servers_tools_run_in_its_runner() -> None:
    server = McpServer("files", url="https://mcp.example.com/mcp", runner="files")
    assert (
        server._tool("read", "Read.", {"type": "object", "properties": {}}, idempotent=True).runner == "files"
    )
    with pytest.raises(DefinitionError, match=re.escape("MCP server 'files': runner must be 1-20 lowercase")):
        McpServer("files", url="https://mcp.example.com/mcp", runner="Files")


def test_the_worker_reads_each_runners_function_from_its_environment() -> None:
    env = {"TOOLPIPE_TOOL_RUNNER": "runner", "TOOLPIPE_TOOL_RUNNERS": '{"mail":"Stack-ToolRunnerMail-1"}'}
    assert ToolRunnerSettings.from_env(env).runners == {"mail": "Stack-ToolRunnerMail-1"}
    assert ToolRunnerSettings.from_env({"TOOLPIPE_TOOL_RUNNER": "runner"}).runners == {}
    with pytest.raises(ConfigurationError, match="invalid environment variables: TOOLPIPE_TOOL_RUNNERS"):
        ToolRunnerSettings.from_env({"TOOLPIPE_TOOL_RUNNERS": "mail"})
