"""The agents a deployment knows, by name. Register yours in `AGENTS`."""

from shared.agents.agent import MAX_ITERATIONS_CEILING, Agent
from shared.agents.assistant import assistant
from shared.errors import UnknownAgentError

AGENTS: dict[str, Agent] = {a.name: a for a in (assistant,)}


def get_agent(name: str) -> Agent:
    try:
        return AGENTS[name]
    except KeyError:
        raise UnknownAgentError(name, list(AGENTS)) from None


__all__ = ["AGENTS", "MAX_ITERATIONS_CEILING", "Agent", "get_agent"]
