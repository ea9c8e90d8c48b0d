"""The agents a run step reaches, injected as its store is: production reads the app's
registry (`RegisteredAgents`); a test gives a plain mapping of its own, with no app loaded."""

from typing import Protocol

from toolpipe.shared.agents import Agent, agent_in_run, get_agent
from toolpipe.shared.messages import RunRecord


class AgentCatalog(Protocol):
    def get(self, name: str) -> Agent:
        """The deployed agent `name` as defined. Raises `UnknownAgentError` when none is."""
        ...

    def in_run(self, run: RunRecord, name: str | None) -> Agent:
        """The agent `name` (None: the run's own) as `run` extends every agent it runs: its MCP
        servers, `read_input` if an S3 object started it, limits a resume raised. Raises
        `UnknownAgentError` when it is not deployed."""
        ...


class RegisteredAgents:
    """The agents of the app this process loaded (`shared/agents`'s registry)."""

    def get(self, name: str) -> Agent:
        return get_agent(name)

    def in_run(self, run: RunRecord, name: str | None) -> Agent:
        return agent_in_run(run, name)


# For the services that are not given a catalog of their own.
REGISTERED_AGENTS = RegisteredAgents()
