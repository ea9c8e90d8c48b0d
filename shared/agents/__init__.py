"""The agents a deployment knows, by name: your app's (`toolpipe.shared.agents.app`), and any
registered in code with `AGENTS[name] = agent`."""

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

from toolpipe.shared.agents.agent import (
    EVENTS_PER_RATE_WAIT,
    Agent,
    ModelPrice,
    ToolProvider,
    execution_events_bound,
    worst_turn_events,
)
from toolpipe.shared.agents.agent_tool import agent_tool
from toolpipe.shared.agents.app import load_app
from toolpipe.shared.agents.app import registered_in_code as _registered_in_code
from toolpipe.shared.agents.errors import UnknownAgentError
from toolpipe.shared.agents.handoff import Handoff, HandoffContext, remove_tool_calls
from toolpipe.shared.agents.hooks import AfterModel, AfterTool, BeforeModel, BeforeTool, Hooks
from toolpipe.shared.agents.read_input import with_input_reader
from toolpipe.shared.errors import ConfigurationError
from toolpipe.shared.messages import AssistantMessage, RunRecord

AGENTS: dict[str, Agent] = {}
NO_AGENTS = (
    "no agents: name your app module with [tool.toolpipe] app in pyproject.toml, --app or "
    "TOOLPIPE_APP (toolpipe init DIR scaffolds a project)"
)


def get_agent(name: str) -> Agent:
    load_app(AGENTS)
    try:
        return AGENTS[name]
    except KeyError:
        raise UnknownAgentError(name, list(AGENTS)) from None


def registered_in_code(name: str) -> bool:
    """`name` was registered in this process's code, not by the app: see `app.registered_in_code`."""
    return _registered_in_code(name, AGENTS)


def all_agents() -> list[Agent]:
    """Every registered agent, your app's first, in the order it defines them."""
    load_app(AGENTS)
    return list(AGENTS.values())


def default_agent_name() -> str:
    """The agent a run uses when it names none: the first your app defines."""
    agents = all_agents()
    if not agents:
        raise ConfigurationError(NO_AGENTS)
    return agents[0].name


# Agents extended with a run's own MCP servers, per cold start: each keeps its servers' tool
# lists cached, so the run's steps and calls do not list them again. Bounded: runs name servers.
_EXTENDED: dict[tuple[str, tuple[str, ...]], tuple[Agent, Agent]] = {}
_EXTENDED_LIMIT = 64
_EXTENDED_LOCK = threading.Lock()


def with_mcp_servers(agent: Agent, urls: Sequence[str] | None) -> Agent:
    """`agent` with the tools of these MCP servers too, named `mcp_<tool>` (`mcp1_`, `mcp2_`...
    for several): how `toolpipe run --mcp URL` tries a server before it goes into an agent."""
    if not urls:
        return agent
    from toolpipe.shared.mcp import McpServer  # only runs that name servers pay for the MCP SDK

    key = (agent.name, tuple(urls))
    with _EXTENDED_LOCK:
        base, found = _EXTENDED.get(key, (None, None))
        if base is not agent or found is None:  # the agent was registered again: extend the new one
            names = ["mcp"] if len(urls) == 1 else [f"mcp{i}" for i in range(1, len(urls) + 1)]
            servers = [McpServer(name, url=url) for name, url in zip(names, urls, strict=True)]
            found = dataclasses.replace(agent, tool_sources=[*agent.tool_sources, *servers])
            if len(_EXTENDED) >= _EXTENDED_LIMIT:
                _EXTENDED.pop(next(iter(_EXTENDED)))
            _EXTENDED[key] = (agent, found)
        return found


def transfer_specs(agent: Agent, lookup: Callable[[str], Agent] = get_agent) -> list[dict[str, Any]]:
    """The agent's `transfer_to_<agent>` tools as the model is offered them, each described by
    its target (a target not deployed is offered still: the model reads why if it calls it).
    `lookup`: where the targets are found (the run step's catalog)."""
    specs = []
    for handoff in agent.transfers:
        try:
            described: str | None = lookup(handoff.target).summary
        except UnknownAgentError:
            described = None
        specs.append(handoff.spec(described))
    return specs


def reply_agent(run: RunRecord, reply: AssistantMessage) -> Agent:
    """The agent whose reply made a call: its tools and policies are the call's, whichever agent
    answers the run by the time the call runs or waits."""
    return agent_in_run(run, reply.agent)


def agent_in_run(run: RunRecord, name: str | None) -> Agent:
    """The agent `name` (None: the run's own) as the run extends every agent it runs: its MCP
    servers, and `read_input` if an S3 object started it."""
    agent = agent_for(name or run.agent, run.mcp_servers, reads_input=run.input_object is not None)
    if run.limits is None:
        return agent
    # Limits a resume raised replace the agent's own for the rest of the run.
    raised: dict[str, Any] = run.limits.given()
    return dataclasses.replace(agent, **raised)


def agent_for(name: str, mcp_servers: Sequence[str] | None, *, reads_input: bool) -> Agent:
    """`agent_in_run` from the parts of a run record it reads (the tool runner gets only those)."""
    agent = with_mcp_servers(get_agent(name), mcp_servers)
    if reads_input:
        agent = with_input_reader(agent)
    return agent


__all__ = [
    "AGENTS",
    "EVENTS_PER_RATE_WAIT",
    "NO_AGENTS",
    "AfterModel",
    "AfterTool",
    "Agent",
    "BeforeModel",
    "BeforeTool",
    "Handoff",
    "HandoffContext",
    "Hooks",
    "ModelPrice",
    "ToolProvider",
    "agent_for",
    "agent_in_run",
    "agent_tool",
    "all_agents",
    "default_agent_name",
    "execution_events_bound",
    "get_agent",
    "registered_in_code",
    "remove_tool_calls",
    "reply_agent",
    "transfer_specs",
    "with_mcp_servers",
    "worst_turn_events",
]
