"""The life of a child run, the run an agent tool's call starts: started by the worker, kept
alive by heartbeats from each of its model steps, and answering its parent's call when it ends.

A tree of runs is bounded twice: by depth (`Agent.max_agent_depth` of the root agent) and by
one budget of calls, tokens and cost that the root and all its children share.
"""

import hashlib
from collections.abc import Iterator

from toolpipe.shared.agents import Agent, get_agent
from toolpipe.shared.agents.errors import UnknownAgentError
from toolpipe.shared.errors import ErrorKind, ToolpipeError, error_text
from toolpipe.shared.history import HistoryStore
from toolpipe.shared.history.errors import RunNotFoundError
from toolpipe.shared.messages import (
    AssistantMessage,
    CallOutcome,
    ParentCall,
    RunRecord,
    RunStatus,
    ToolCall,
    ToolResult,
    UserMessage,
)
from toolpipe.shared.runs.calls import result_slot
from toolpipe.shared.runs.catalog import REGISTERED_AGENTS, AgentCatalog
from toolpipe.shared.runs.events import NO_EVENTS, EventPublisher
from toolpipe.shared.runs.ports import ExecutionStarter, TaskReporter
from toolpipe.shared.runs.recorder import ResultRecorder
from toolpipe.shared.runs.results import fit_for_model
from toolpipe.shared.runs.time_limit import deadline_after, earliest, run_max_duration_waits
from toolpipe.shared.telemetry import child_trace

PARENT_CANCELLED = "its parent run was cancelled"


def child_run_id(parent_run_id: str, seq: int) -> str:
    """Named by the parent's call slot: a redelivered call finds its child already there."""
    return hashlib.sha256(f"{parent_run_id}:{seq}".encode()).hexdigest()[:32]


def depth_refusal(run: RunRecord, root_agent: Agent) -> str | None:
    """Why a child run may not start here, or None."""
    if run.depth + 1 > root_agent.max_agent_depth:
        return (
            f"Not run: agents used as tools nest at most {root_agent.max_agent_depth} deep "
            "in this run. Do this part yourself."
        )
    return None


def start_child(
    store: HistoryStore,
    starter: ExecutionStarter,
    run: RunRecord,
    reply: AssistantMessage,
    call: ToolCall,
    seq: int,
    child_agent: str,
    task: str,
    task_token: str,
    events: EventPublisher = NO_EVENTS,
) -> str:
    """Create and start the child run that answers this call. Idempotent: every step is keyed
    by the parent's call slot."""
    child_id = child_run_id(run.run_id, seq)
    store.put_parent_token(child_id, task_token)
    # A child ends by its parent's deadline, and by its own agent's max_duration when sooner. A
    # parent whose waits for people do not count has no fixed deadline to pass on: its own timer
    # counts the child's whole time as a call's (docs/concepts/runs.md).
    try:
        own = get_agent(child_agent)
        own_limit, own_waits = own.max_duration, run_max_duration_waits(own, None)
    except UnknownAgentError:
        own_limit, own_waits = None, "count"  # its first step fails it, saying so
    inherited = run.deadline if run.max_duration_waits == "count" else None
    deadline = earliest(inherited, deadline_after(own_limit))
    child = RunRecord(
        run_id=child_id,
        agent=child_agent,
        status=RunStatus.RUNNING,
        timezone=run.timezone,
        caller=run.caller,
        parent=ParentCall(run_id=run.run_id, call_id=call.id, seq=seq, turn=reply.turn, tool=call.name),
        root_run_id=run.root_run_id or run.run_id,
        depth=run.depth + 1,
        trace=child_trace(run, seq),
        deadline=deadline,
        max_duration=run.max_duration if inherited and deadline == inherited else own_limit,
        max_duration_waits="count" if inherited and deadline == inherited else own_waits,
    )
    created = store.create_run(child, UserMessage(seq=1, turn=0, content=task))
    if created:
        events.run_started(child)  # only where it was created: a redelivery finds it there
    # Read after the child is written: a cancel of the parent either saw the child (and
    # cancelled it) or ended before it existed, and is seen here. No child outlives it.
    if store.get_run(run.run_id).status is RunStatus.CANCELLED:
        if store.finish_run(child_id, RunStatus.CANCELLED, error=PARENT_CANCELLED):
            events.run_ended(store, child_id)
        return child_id
    # A redelivery's child was created earlier, with the deadline of then.
    started = child if created else store.get_run(child_id)
    starter.start(child_id, deadline=started.deadline, waits=started.max_duration_waits)
    return child_id


def child_runs(store: HistoryStore, run: RunRecord) -> Iterator[RunRecord]:
    """The child runs this run started: one per agent-tool call, named by the call's slot."""
    try:
        # The agent's own tools only: agent tools are never listed from a source (no MCP call).
        # Every agent that answered the run (a handoff moves it): any may have made the call.
        agents = {run.agent, *(h.to_agent for h in run.handoffs)}
        agent_tools: set[str] | None = {
            name
            for agent in agents
            for t in get_agent(agent).tools
            if t.child_agent
            for name in (t.name, t.source_name)
            if name
        }
    except ToolpipeError:
        agent_tools = None  # an agent no longer registered: every call slot may hold a child
    for item in store.iter_history(run.run_id):
        if not isinstance(item, AssistantMessage):
            continue
        for index, call in enumerate(item.tool_calls):
            if agent_tools is not None and call.name not in agent_tools:
                continue
            try:
                yield store.get_run(child_run_id(run.run_id, result_slot(item, index)))
            except RunNotFoundError:
                continue  # refused before it started, or not started yet


def heartbeat_parent(store: HistoryStore, reporter: TaskReporter, run: RunRecord) -> None:
    """The parent's call waits with a heartbeat timeout: each step of the child is a beat."""
    if run.parent is None:
        return
    token = store.get_parent_token(run.run_id)
    if token is not None:
        reporter.heartbeat(token)


def answer_parent(
    store: HistoryStore,
    reporter: TaskReporter,
    run: RunRecord,
    status: RunStatus,
    output: str | None,
    error: str | None,
    events: EventPublisher = NO_EVENTS,
    agents: AgentCatalog = REGISTERED_AGENTS,
) -> None:
    """Give the parent's call the child's answer, or an error result saying how it ended.
    Conditional: a retried ending finds the parent's slot taken and changes nothing. `agents`:
    where the parent's agent is found."""
    parent = run.parent
    if parent is None:
        return
    ok = status is RunStatus.SUCCEEDED
    content = (
        (output or "") if ok else error_text(f"the '{run.agent}' agent stopped ({status.value}): {error}")
    )
    # The parent's model reads the child's answer as any tool result: bounded by its agent.
    parent_run = store.get_run(parent.run_id)
    parent_agent = agents.get(parent_run.current_agent)  # the call's: the run moves on only after it
    content, ref, chars = fit_for_model(store, parent_agent, parent.run_id, parent.seq, content)
    result = ToolResult(
        seq=parent.seq,
        turn=parent.turn,
        call_id=parent.call_id,
        tool=parent.tool,
        content=content,
        status="ok" if ok else "error",
        error_type=None if ok else ErrorKind.CHILD_RUN_ENDED,
        full_result_ref=ref,
        full_result_chars=chars,
        started_at=run.created_at,  # the call ran as the child run
    )
    ResultRecorder(store, events).record(parent_run, result)
    token = store.get_parent_token(run.run_id)
    if token is not None:
        reporter.succeed(
            token, CallOutcome(seq=parent.seq, status=result.status).model_dump(exclude_none=True)
        )
