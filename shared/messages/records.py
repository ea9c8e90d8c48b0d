"""A run's record (status, usage, agent, handoffs, what started it) and its summary in listings.
Read by every function and the runs API; stored as the run's META item."""

from enum import StrEnum
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from toolpipe.shared.messages.common import MaxDurationWaits, Usage, utc_now


class RunStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LIMIT = "limit"
    # Stopped by `POST /runs/{id}/cancel`: its execution stopped, its child runs cancelled too.
    CANCELLED = "cancelled"


class ParentCall(BaseModel):
    """The tool call of another run that this (child) run answers."""

    model_config = ConfigDict(frozen=True)
    run_id: str
    call_id: str
    seq: int
    turn: int
    tool: str


class InputObject(BaseModel):
    """The S3 object a triggered run works on: a reference the `read_input` tool reads in
    ranges, never contents. Written once with the run record, so no tool can point it elsewhere."""

    model_config = ConfigDict(frozen=True)
    bucket: str
    key: str
    version_id: str | None = None  # None: an unversioned bucket; reads then check `etag`
    size: int
    content_type: str | None = None
    etag: str | None = None
    # Where the run's ending is written, in the same bucket: `<answer_key>.answer.md` when it
    # succeeded, `<answer_key>.error.md` otherwise.
    answer_key: str


class TraceContext(BaseModel):
    """The trace a run belongs to, kept with the run so every invocation that works on it, in
    any execution, after any pause or restart, adds its spans to the same trace
    (shared/telemetry). Never in what the model reads."""

    model_config = ConfigDict(frozen=True)
    trace_id: str = Field(pattern=r"^[0-9a-f]{32}$", description="The W3C trace id (32 hex digits).")
    parent_span_id: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{16}$",
        description="The span the run's own span is a child of: the caller's (a `traceparent` "
        "header), or the parent run's tool call for a child run; null for a trace the run began.",
    )
    sampled: bool = True


class RunLimits(BaseModel):
    """Limits a resume raises, named as the agent names them (`shared/agents/agent.py`); each
    replaces the agent's own for the rest of the run."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    max_iterations: int | None = Field(default=None, ge=1, le=100_000, description="Model turns in all.")
    max_tool_calls: int | None = Field(default=None, ge=1, le=1_000_000, description="Tool calls in all.")
    max_tokens: int | None = Field(default=None, ge=1, description="Tokens in all.")
    max_cost_usd: float | None = Field(
        default=None, gt=0, le=1_000_000, description="Model cost in all, USD."
    )
    max_repair_turns: int | None = Field(default=None, ge=1, le=1_000)
    max_identical_calls: int | None = Field(default=None, ge=1, le=1_000)
    max_duration: int | None = Field(
        default=None, ge=1, le=365 * 24 * 3600, description="Wall-clock seconds from the resume."
    )

    def given(self) -> dict[str, int | float]:
        """The limits set here, by name."""
        return {name: value for name, value in self.model_dump().items() if value is not None}


class ResumeRecord(BaseModel):
    """One resume of a run (`POST /runs/{id}/resume`), as its record lists them."""

    model_config = ConfigDict(frozen=True)
    execution: int = Field(description="The execution the run went on in.")
    turn: int = Field(description="The last turn stored when it resumed; the run goes on from there.")
    ended: RunStatus = Field(description="How the run had ended: failed or limit.")
    error: str | None = Field(default=None, description="Why it had ended.")
    limits: RunLimits | None = Field(default=None, description="The limits this resume raised.")
    by: str = Field(description="Who resumed it.")
    at: str = Field(default_factory=utc_now)
    # A hash of the Idempotency-Key it came with (a retry with the same key is this resume).
    key: str | None = Field(default=None, exclude=False, repr=False)


class ForkOrigin(BaseModel):
    """The run and turn a fork was made from (`POST /runs/{id}/fork`)."""

    model_config = ConfigDict(frozen=True)
    run_id: str
    turn: int = Field(description="The fork's history is the parent's first `turn` turns, copied.")


class HandoffRecord(BaseModel):
    """One change of the agent that answers a run, as its record lists them."""

    model_config = ConfigDict(frozen=True)
    turn: int = Field(description="The turn whose call made the change; the new agent answers from the next.")
    kind: Literal["transfer", "escalate"]
    from_agent: str
    to_agent: str
    via: str | None = Field(
        default=None, description="The transfer tool the model called, if it was the model."
    )
    tools: list[str] | None = Field(
        default=None,
        description="The tools the new agent may use (its tool provider and the caller's allow-list); "
        "null: all of its tools.",
    )


class RunRecord(BaseModel):
    model_config = ConfigDict(frozen=True)
    run_id: str
    agent: str
    status: RunStatus
    timezone: str = "UTC"
    caller: str | None = None
    tools: list[str] | None = None  # the tools this run may use; None: all the agent's
    # The caller's own allow-list as sent (`POST /runs {"tools"}`): it narrows every agent the
    # run is handed to, as `tools` narrows the first.
    requested_tools: list[str] | None = None
    # MCP server URLs whose tools this run offers besides the agent's (`toolpipe run --mcp`).
    mcp_servers: list[str] | None = None
    parent: ParentCall | None = None
    turn: int = 0
    usage: Usage = Field(default_factory=Usage)
    # The answer; when longer than the record may hold, its beginning, with the whole answer
    # in S3 under `output_ref` (`output_chars` long).
    output: str | None = None
    output_ref: str | None = None
    output_chars: int | None = None
    error: str | None = None
    # The run at the top of a tree of agent-tool runs (itself for a root) and this run's depth
    # in it (0 for a root): limits are shared by the whole tree.
    root_run_id: str | None = None
    depth: int = 0
    # Long runs go on in fresh executions (Step Functions caps one at 25,000 history events):
    # the current one's number, and the turn it started after.
    execution: int = 1
    execution_start_turn: int = 0
    # A run started with an idempotency key: a hash of the request it started with, so the same
    # key with another request is told apart from a retry of the same one.
    request_hash: str | None = None
    # Set for a run an S3 object started (shared/runs/triggers.py).
    input_object: InputObject | None = None
    # A root run's totals over its whole tree (itself and its agent-tool runs), as read with the
    # record; None for a child run, whose tree totals are its root's.
    tree_usage: Usage | None = None
    # The caller's own labels (`POST /runs {"metadata"}`), returned as given.
    metadata: dict[str, str] | None = None
    # The agent answering now, when a handoff moved the run from `agent` (which started it).
    active_agent: str | None = None
    handoffs: list[HandoffRecord] = Field(default_factory=list)
    # The run's wall-clock limit in seconds (its agent's `max_duration`, or less as the start
    # asked) and when it passes (RFC 3339, UTC): each execution's timer waits for `deadline`.
    max_duration: int | None = None
    deadline: str | None = None
    # Whether time waiting for a person or a program counts toward `max_duration` ("count") or
    # not ("exclude": `deadline` is then when the limit passes if the run waits no more).
    max_duration_waits: MaxDurationWaits = "count"
    # Limits raised by resumes (the agent's own for the others), and every resume, in order.
    limits: RunLimits | None = None
    resumes: list[ResumeRecord] = Field(default_factory=list)
    # A fork's origin; a run's forks (their ids, in no set order: a set, written idempotently).
    forked_from: ForkOrigin | None = None
    forks: list[str] = Field(default_factory=list)
    # None for runs recorded before traces were: their trace id is derived from the root run's id.
    trace: TraceContext | None = None
    created_at: str = Field(default_factory=utc_now)
    updated_at: str = Field(default_factory=utc_now)
    retain_until: int | None = Field(
        default=None,
        description="When the ended run's items and objects expire (epoch seconds: its end plus the "
        "stack's retention_days); null while it runs.",
    )

    @property
    def current_agent(self) -> str:
        return self.active_agent or self.agent


class RunSummary(BaseModel):
    """One run in a listing (`GET /runs`): what the index by caller holds."""

    model_config = ConfigDict(frozen=True)
    run_id: str
    agent: str
    status: RunStatus
    caller: str | None = None
    created_at: str
    metadata: dict[str, str] | None = None
    parent_run_id: str | None = Field(default=None, description="Set for a child run (an agent tool's).")

    @classmethod
    def of(cls, record: RunRecord) -> "RunSummary":
        return cls(
            run_id=record.run_id,
            agent=record.agent,
            status=record.status,
            caller=record.caller,
            created_at=record.created_at,
            metadata=record.metadata,
            parent_run_id=record.parent.run_id if record.parent else None,
        )


# --- contracts that travel through Step Functions and SQS --------------------------------
