"""Starting a run: validate the request, write the run and its first message, start the execution."""

import uuid

from shared.agents import Agent, get_agent, with_mcp_servers
from shared.errors import (
    UnknownToolsRequestedError,
)
from shared.history import HistoryStore
from shared.messages import (
    RunRecord,
    RunStatus,
    StartRunRequest,
    UserMessage,
)
from shared.runs.ports import ExecutionStarter


def new_run_id() -> str:
    return uuid.uuid4().hex


class RunStarter:
    def __init__(self, store: HistoryStore, starter: ExecutionStarter) -> None:
        self._store = store
        self._starter = starter

    def start(self, request: StartRunRequest, caller: str) -> RunRecord:
        """Start a run for `caller`, the request's authenticated identity (never a body field):
        tools see it as `ToolContext.caller`, and only this principal may read the run."""
        # An unknown agent is the caller's error, before anything is written.
        agent = with_mcp_servers(get_agent(request.agent), request.mcp_servers)
        record = RunRecord(
            run_id=new_run_id(),
            agent=request.agent,
            status=RunStatus.RUNNING,
            timezone=request.timezone,
            caller=caller,
            tools=run_tools(agent, request, caller),
            mcp_servers=request.mcp_servers or None,
        )
        if not self._store.create_run(record, UserMessage(seq=1, turn=0, content=request.prompt)):
            raise RuntimeError(f"run id {record.run_id} is taken")  # a fresh UUID: never expected
        try:
            self._starter.start(record.run_id)
        except Exception as e:
            # No execution, so nothing would ever end it: the run must not stay `running`.
            self._store.finish_run(
                record.run_id, RunStatus.FAILED, error=f"the run could not be started: {e}"
            )
            raise
        return record


def run_tools(agent: Agent, request: StartRunRequest, caller: str) -> list[str] | None:
    """The tools a run may use: the agent's, narrowed by its tool provider and by the caller's
    allow-list. None means all of the agent's tools."""
    chosen: set[str] | None = None
    if agent.tool_provider is not None:
        chosen = set(agent.tool_provider(request.prompt, caller))
    if request.tools is not None:
        unknown = sorted(set(request.tools) - set(agent.registry.names))
        if unknown:
            raise UnknownToolsRequestedError(agent.name, unknown)
        chosen = set(request.tools) if chosen is None else chosen & set(request.tools)
    return None if chosen is None else [name for name in agent.registry.names if name in chosen]
