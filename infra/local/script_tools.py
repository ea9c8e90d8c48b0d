"""A model script's tool calls checked against your app's agents, when the script is loaded.

A script names tools by the names a model would send. A typo (`get_wether`) would otherwise run:
the orchestrator tells the model the tool is unknown, the script plays its next reply anyway, and
the run ends `succeeded` with an error for an answer. So a call is checked when the file is read,
as the agent that would send it: the run's agent, then the agent each `transfer_to_<agent>` call
hands the run to (a script's replies are one list, whichever agent asks: model_script.py).

A script does not say which agent it is for (its `when` picks it by prompt): it passes if some
agent of the app plays it through, the command's own agent tried first. Refused, the line names
the agent that played it furthest and the tool it lacks.

Not checked: the tools of an agent's tool sources (an MCP server's, listed at run time) and a
transfer to an agent the app does not define (the run reports that itself).
"""

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from toolpipe.infra.local.model_script import ModelScriptError, ModelScriptFile, Script
from toolpipe.shared.agents.agent import Agent

# The built-in tool a run started by an S3 object gets (shared/agents/read_input.py): any agent may.
_BUILT_IN = frozenset({"read_input"})
# `run --mcp URL` names its servers' tools `mcp_<tool>` (`mcp1_`, `mcp2_`… for several).
MCP_PREFIX = "mcp"


@dataclass(frozen=True)
class _Lacks:
    """Where a script first calls a tool its agent lacks: the count of replies played before."""

    played: int
    where: str
    agent: Agent
    tool: str


def check_script_tools(
    path: Path,
    script: ModelScriptFile,
    agents: Sequence[Agent],
    first: str | None = None,
    mcp: bool = False,
) -> None:
    """Refuse a script whose calls no agent of the app can make.

    Args:
        path: the file, as the line names it.
        script: the file, parsed.
        agents: the app's agents (none: nothing to check against).
        first: the agent the command runs, tried first (None: the app's order).
        mcp: the command offers MCP servers' tools too (`run --mcp`): `mcp…` names pass.

    Raises:
        ModelScriptError: `FILE: scripts[0].replies[0].tool_calls[0]: agent 'a' has no tool 'x' …`.
    """
    if not agents:
        return
    by_name = {agent.name: agent for agent in agents}
    order = sorted(agents, key=lambda agent: agent.name != first)  # stable: the app's order after
    for s, candidate in enumerate(script.scripts):
        lacks = [_first_lack(candidate, agent, by_name, mcp) for agent in order]
        if any(lack is None for lack in lacks):
            continue
        furthest = max((lack for lack in lacks if lack is not None), key=lambda lack: lack.played)
        raise ModelScriptError(f"{path}: scripts[{s}].{furthest.where}: {_sentence(furthest)}")


def _first_lack(script: Script, start: Agent, agents: dict[str, Agent], mcp: bool) -> _Lacks | None:
    """The first call `script` makes that its agent lacks, starting with `start`; None: none."""
    agent: Agent | None = start
    for r, reply in enumerate(script.replies):
        if agent is None:  # handed to an agent the app does not define: the run says so
            return None
        after: Agent | None = agent
        for c, call in enumerate(reply.tool_calls):
            handoff = agent.transfer_named(call.name)
            if handoff is not None:
                after = agents.get(handoff.target)
            elif not _has(agent, call.name, mcp):
                return _Lacks(r, f"replies[{r}].tool_calls[{c}]", agent, call.name)
        agent = after
    return None


def _names(agent: Agent) -> list[str]:
    """The tool names the agent answers to: wire names, the names as defined, its transfers'."""
    defined = [t.name for t in agent.tools]
    return [*agent.registry.static_names, *defined, *(h.name for h in agent.transfers), *_BUILT_IN]


def _has(agent: Agent, name: str, mcp: bool) -> bool:
    # A tool source's tools are known only once it is reached, at run time: not checked.
    return name in _names(agent) or bool(agent.tool_sources) or (mcp and name.startswith(MCP_PREFIX))


def _sentence(lack: _Lacks) -> str:
    names = list(dict.fromkeys(n for n in _names(lack.agent) if n not in _BUILT_IN))
    close = difflib.get_close_matches(lack.tool, names, n=1)
    # A run's error is cut short (shared/model/openai_client.py): the likely fix first, alone.
    hint = f"did you mean '{close[0]}'?" if close else f"its tools: {', '.join(names) or 'none'}"
    return f"agent '{lack.agent.name}' has no tool '{lack.tool}' ({hint})"
