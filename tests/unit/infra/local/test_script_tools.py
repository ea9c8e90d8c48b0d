"""A model script's calls checked against the app's agents when it is loaded: a tool its agent
lacks is refused, naming the agent and the tool (issue 33, item 5)."""

from pathlib import Path

import pytest

from toolpipe import Agent, tool
from toolpipe.infra.local.model_script import FileResponder, ModelScriptError, load_script
from toolpipe.infra.local.script_tools import check_script_tools
from toolpipe.infra.local.scripted_model import HttpError


@tool
def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city.
    """
    return city


@tool
def refund(order: str) -> str:
    """Refund an order.

    Args:
        order: The order's id.
    """
    return order


BILLING = Agent(name="billing", instructions="You refund.", tools=[refund])
WEATHER = Agent(name="weather", instructions="You answer.", tools=[get_weather], handoffs=[BILLING])
AGENTS = [WEATHER, BILLING]


def _script(tmp_path: Path, *calls: str) -> Path:
    """A script of one reply per call, then an answer."""
    replies = "".join(f"      - tool_calls: [{{name: {name}}}]\n" for name in calls)
    path = tmp_path / "script.yaml"
    path.write_text(f"scripts:\n  - when: 'x'\n    replies:\n{replies}      - content: done\n")
    return path


def _check(path: Path, first: str | None = None, mcp: bool = False) -> None:
    check_script_tools(path, load_script(path), AGENTS, first, mcp)


def test_a_misspelt_tool_is_refused_naming_the_agent_and_the_tool(tmp_path: Path) -> None:
    path = _script(tmp_path, "get_wether")
    with pytest.raises(ModelScriptError) as refused:
        _check(path)
    assert str(refused.value) == (
        f"{path}: scripts[0].replies[0].tool_calls[0]: agent 'weather' has no tool 'get_wether' "
        "(did you mean 'get_weather'?)"
    )


def test_a_tool_no_agent_has_lists_the_tools_of_the_agent_that_got_furthest(tmp_path: Path) -> None:
    # billing plays nothing of it; weather plays the transfer, then billing lacks the tool.
    path = _script(tmp_path, "transfer_to_billing", "send_email")
    with pytest.raises(ModelScriptError) as refused:
        _check(path, first="billing")
    assert str(refused.value) == (
        f"{path}: scripts[0].replies[1].tool_calls[0]: agent 'billing' has no tool 'send_email' "
        "(its tools: refund)"
    )


def test_calls_pass_as_the_agent_a_transfer_hands_the_run_to(tmp_path: Path) -> None:
    _check(_script(tmp_path, "get_weather", "transfer_to_billing", "refund"))
    # A script for another agent than the command's passes too (a child run's, a handoff's).
    _check(_script(tmp_path, "refund"), first="weather")
    # Built in (a run started by an S3 object), or an MCP server's tool with `run --mcp`.
    _check(_script(tmp_path, "read_input"))
    _check(_script(tmp_path, "mcp_search"), mcp=True)
    with pytest.raises(ModelScriptError, match="has no tool 'mcp_search'"):
        _check(_script(tmp_path, "mcp_search"))


def test_no_app_means_nothing_to_check_against(tmp_path: Path) -> None:
    path = _script(tmp_path, "get_wether")
    check_script_tools(path, load_script(path), [])


def test_a_server_refuses_a_script_edited_to_call_a_tool_its_agent_lacks(tmp_path: Path) -> None:
    path = _script(tmp_path, "get_weather")
    respond = FileResponder(path, lambda: AGENTS)
    request = {"messages": [{"role": "user", "content": "x"}]}
    assert not isinstance(respond(request), HttpError)
    path.write_text(path.read_text().replace("get_weather", "get_wether") + "# edited\n")
    refused = respond(request)
    assert isinstance(refused, HttpError) and refused.status == 400
    assert "agent 'weather' has no tool 'get_wether' (did you mean 'get_weather'?)" in str(refused.body)
