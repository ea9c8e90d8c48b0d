"""Starting a run: validate the request, write the run and its first message, start the execution."""

import hashlib
import json
import uuid
from typing import NamedTuple

from toolpipe.shared.agents import AGENTS, Agent, default_agent_name, get_agent, with_mcp_servers
from toolpipe.shared.agents.app import reachable
from toolpipe.shared.agents.read_input import read_input, with_input_reader
from toolpipe.shared.history import HistoryStore
from toolpipe.shared.history.errors import QuotaExceededError
from toolpipe.shared.messages import (
    InputObject,
    RunRecord,
    RunStatus,
    StartRunRequest,
    UserMessage,
)
from toolpipe.shared.runs.errors import IdempotencyConflictError, UnknownToolsRequestedError
from toolpipe.shared.runs.events import NO_EVENTS, EventPublisher
from toolpipe.shared.runs.ports import ExecutionStarter
from toolpipe.shared.runs.quota import RUNNING, RunQuota
from toolpipe.shared.runs.time_limit import deadline_after, run_max_duration, run_max_duration_waits
from toolpipe.shared.telemetry import new_trace


def new_run_id() -> str:
    return uuid.uuid4().hex


def canonical_request(request: StartRunRequest) -> str:
    """The request as a retry of it may spell it: keys in any order, an empty map or list the
    same as none, an allow-list in any order (it is a set)."""
    fields = request.model_dump(mode="json")
    for name, value in list(fields.items()):
        if value in ({}, []):
            fields[name] = None
    if fields.get("tools") is not None:
        fields["tools"] = sorted(set(fields["tools"]))
    return json.dumps(fields, sort_keys=True, ensure_ascii=False)


def keyed_run_id(caller: str, key: str) -> str:
    """The run an idempotency key names: one per caller and key, so a key is the caller's own
    (another principal's same key is another run) and a retry finds the run by its id alone."""
    return hashlib.sha256(f"{caller}\n{key}".encode()).hexdigest()[:32]


class StartedRun(NamedTuple):
    record: RunRecord
    replayed: bool  # True: an earlier start with the same key made this run; nothing new began


class RunStarter:
    def __init__(
        self,
        store: HistoryStore,
        starter: ExecutionStarter,
        *,
        events: EventPublisher = NO_EVENTS,
        quota: RunQuota | None = None,
    ) -> None:
        """`quota`: the per-caller quotas every start is counted against (`POST /runs`'s); None
        counts nothing (the triggers' starter)."""
        self._store = store
        self._starter = starter
        self._events = events
        self._quota = quota

    def start(
        self,
        request: StartRunRequest,
        caller: str,
        idempotency_key: str | None = None,
        input_object: InputObject | None = None,
        traceparent: str | None = None,
    ) -> StartedRun:
        """Start a run for `caller`, the request's authenticated identity (never a body field):
        tools see it as `ToolContext.caller`, and only this principal may read the run.

        With an `idempotency_key` (an API client's retry, an S3 object version, an event id),
        the same key and request start one run however often they come; the same key with
        another request raises `IdempotencyConflictError`. Over a quota, `QuotaExceededError`
        (nothing written); a retry of a run that exists is answered whatever the quotas.

        An `input_object` (the S3 trigger) is the file the run works on: its agent gets the
        `read_input` tool, which reads that object and no other."""
        # An unknown agent is the caller's error, before anything is written.
        agent_name = request.agent or default_agent_name()
        agent = with_mcp_servers(get_agent(agent_name), request.mcp_servers)
        if input_object is not None:
            agent = with_input_reader(agent)
        tools = run_tools(agent, request, caller, reads_input=input_object is not None)
        request_hash = None
        if idempotency_key is not None:
            started_with = canonical_request(request)
            if input_object is not None:
                started_with += input_object.model_dump_json()
            request_hash = hashlib.sha256(started_with.encode()).hexdigest()
        max_duration = run_max_duration(agent, request.max_duration)
        record = RunRecord(
            run_id=new_run_id() if idempotency_key is None else keyed_run_id(caller, idempotency_key),
            agent=agent_name,
            status=RunStatus.RUNNING,
            timezone=request.timezone,
            caller=caller,
            tools=tools,
            requested_tools=request.tools,
            mcp_servers=request.mcp_servers or None,
            request_hash=request_hash,
            input_object=input_object,
            metadata=request.metadata,
            max_duration=max_duration,
            deadline=deadline_after(max_duration),
            max_duration_waits=run_max_duration_waits(agent, request.max_duration_waits),
            # The caller's trace when it sent one (W3C Trace Context), else a trace of its own.
            trace=new_trace(traceparent),
        )
        if not self._create(record, UserMessage(seq=1, turn=0, content=request.input), caller):
            if idempotency_key is None:
                raise RuntimeError(f"run id {record.run_id} is taken")  # a fresh UUID: never expected
            return StartedRun(self._replay(idempotency_key, record), replayed=True)
        # Only for the start that created the run (a replayed key publishes nothing), and before
        # the execution starts: a fast run's ending is then seldom published before it.
        self._events.run_started(record)
        try:
            self._starter.start(record.run_id, deadline=record.deadline, waits=record.max_duration_waits)
        except Exception as e:
            # No execution, so nothing would ever end it: the run must not stay `running`.
            if self._store.finish_run(
                record.run_id, RunStatus.FAILED, error=f"the run could not be started: {e}"
            ):
                self._events.run_ended(self._store, record.run_id)
            raise
        return StartedRun(record, replayed=False)

    def _create(self, record: RunRecord, first: UserMessage, caller: str) -> bool:
        return create_counted(self._store, self._starter, self._quota, record, first)

    def _replay(self, key: str, wanted: RunRecord) -> RunRecord:
        existing = self._store.get_run(wanted.run_id)
        if existing.request_hash != wanted.request_hash:
            raise IdempotencyConflictError(key, existing.run_id)
        if existing.status is RunStatus.RUNNING:
            # The first start may have died between writing the run and starting its execution:
            # starting one that exists does nothing, so a retry finishes what it began.
            self._starter.start(
                existing.run_id, existing.execution, existing.deadline, existing.max_duration_waits
            )
        return existing


def create_counted(
    store: HistoryStore,
    starter: ExecutionStarter,
    quota: RunQuota | None,
    record: RunRecord,
    first: UserMessage,
) -> bool:
    """Create the run, counted against its caller's quotas (`quota`; None counts nothing): False
    if it exists, `QuotaExceededError` (nothing written) when a quota is full."""
    caller = record.caller or ""
    admission = None if quota is None else quota.admission(caller)
    try:
        return store.create_run(record, first, admission)
    except QuotaExceededError as e:
        # Full: first give back what runs that ended still hold, then try once more.
        if quota is None or e.quota != RUNNING:
            raise
        if not quota.repair(store, starter, caller):
            raise
        return store.create_run(record, first, admission)


def run_tools(
    agent: Agent, request: StartRunRequest, caller: str, *, reads_input: bool = False
) -> list[str] | None:
    """The tools a run may use: the agent's, narrowed by its tool provider and by the caller's
    allow-list. None means all of the agent's tools. The allow-list may name the tools of the
    agents the run can be handed to as well; anything else is the caller's error."""
    if request.tools is not None:
        known = {name for reached in reachable(agent, AGENTS) for name in reached.registry.names}
        unknown = sorted(set(request.tools) - known - set(agent.registry.names))
        if unknown:
            raise UnknownToolsRequestedError(agent.name, unknown)
    return tools_for(agent, request.input, caller, request.tools, reads_input=reads_input)


def tools_for(
    agent: Agent, prompt: str, caller: str | None, requested: list[str] | None, *, reads_input: bool = False
) -> list[str] | None:
    """`agent`'s tools for a run of this prompt and caller: narrowed by the agent's tool provider
    and by the caller's allow-list (`requested`). None means all of them. `reads_input`: an S3
    object started the run, and its way to the file (`read_input`) is never narrowed away."""
    chosen: set[str] | None = None
    if agent.tool_provider is not None:
        chosen = set(agent.tool_provider(prompt, caller))
    if requested is not None:
        chosen = set(requested) if chosen is None else chosen & set(requested)
    if chosen is None:
        return None
    tools = [name for name in agent.registry.names if name in chosen]
    if reads_input and read_input.name not in tools:
        tools.append(read_input.name)
    return tools
