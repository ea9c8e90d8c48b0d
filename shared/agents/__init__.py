"""The agents a deployment knows, by name. Register yours in `AGENTS`."""

from shared.agents.agent import Agent, ModelPrice, ToolProvider, execution_events_bound, worst_turn_events
from shared.agents.agent_tool import agent_tool
from shared.agents.assistant import assistant
from shared.agents.hooks import AfterModel, AfterTool, BeforeModel, BeforeTool, Hooks
from shared.errors import UnknownAgentError

AGENTS: dict[str, Agent] = {a.name: a for a in (assistant,)}


def get_agent(name: str) -> Agent:
    try:
        return AGENTS[name]
    except KeyError:
        raise UnknownAgentError(name, list(AGENTS)) from None


__all__ = [
    "AGENTS",
    "AfterModel",
    "AfterTool",
    "Agent",
    "BeforeModel",
    "BeforeTool",
    "Hooks",
    "ModelPrice",
    "ToolProvider",
    "agent_tool",
    "execution_events_bound",
    "get_agent",
    "worst_turn_events",
]
