"""What crosses a boundary: history items, run records, and the small contracts that travel
through Step Functions and SQS (ids only, never message contents)."""

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from toolpipe.shared.errors import ErrorKind


def text_safe(text: str) -> str:
    """Lone surrogates (text cut mid-character, `\\ud800` escapes) cannot be stored as UTF-8:
    each becomes `?`, so one odd character never fails a write."""
    return text.encode("utf-8", "replace").decode("utf-8")


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_calls: int = 0
    # Integer micro-dollars: DynamoDB counters are exact for integers (floats need Decimal).
    cost_micro_usd: int = 0
    tool_calls: int = 0  # calls the model asked for

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(**{name: getattr(self, name) + getattr(other, name) for name in Usage.model_fields})


class _Item(BaseModel):
    model_config = ConfigDict(frozen=True)
    seq: int = Field(ge=1, description="Position in the run's history; also the DynamoDB sort key.")
    turn: int = Field(ge=0, description="Model turn this item belongs to (0 = the user's input).")
    created_at: str = Field(default_factory=utc_now)


class ToolCall(BaseModel):
    model_config = ConfigDict(frozen=True)
    # The id the model is shown: unique within the run. A call's identity is its history slot;
    # this id only pairs the call with its result in the messages sent back to the model.
    id: str
    name: str
    # Raw JSON text exactly as the model sent it: validation happens at execution, and the
    # model must see its own call unchanged on the next turn.
    arguments: str
    # The id the model gave, when it was replaced because it was empty, repeated or reused.
    model_id: str | None = None


class UserMessage(_Item):
    kind: Literal["user"] = "user"
    content: str
    # Written by toolpipe, not the user: asks the model to fix an answer that failed validation.
    repair: bool = False


class AssistantMessage(_Item):
    kind: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    # The agent whose turn it was (a run may be handed from agent to agent); None: the run's own.
    agent: str | None = None
    # What the model call that made it cost, kept so a retried step can still count it.
    usage: Usage | None = None


class HandoffAction(BaseModel):
    """What a call asked of the run besides its result: continue under another agent
    (`transfer`), or give the turn back to the agent that handed off to this one (`escalate`)."""

    model_config = ConfigDict(frozen=True)
    kind: Literal["transfer", "escalate"]
    agent: str | None = Field(default=None, description="The agent a transfer goes to.")
    # "model": a `transfer_to_<agent>` call (wins over tools' requests in its turn); "tool": a
    # tool's `context.actions`.
    by: Literal["model", "tool"] = "tool"


class ToolResult(_Item):
    kind: Literal["tool_result"] = "tool_result"
    call_id: str  # the id of the call it answers, as the model was shown it
    tool: str
    content: str
    status: Literal["ok", "error"]
    duration_ms: int | None = None
    error_type: ErrorKind | None = None
    attempts: int = 1  # deliveries of the call (SQS receive count)
    # Set when the result was longer than the agent's max_result_chars: `content` is then a
    # preview, and the whole result is the S3 object under this key.
    full_result_ref: str | None = None
    full_result_chars: int | None = None
    # What the operator needs and the model was not shown (the "generic" error policy, the
    # Step Functions error of a call that did not complete).
    error_detail: str | None = None
    # Set when the call handed the run to another agent or escalated (shared/runs/handoffs.py).
    handoff: HandoffAction | None = None


HistoryItem = Annotated[UserMessage | AssistantMessage | ToolResult, Field(discriminator="kind")]
HISTORY_ITEM: TypeAdapter[HistoryItem] = TypeAdapter(HistoryItem)


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


class ExecutionInput(BaseModel):
    """The whole input of a state machine execution: a reference, never the conversation."""

    run_id: str


class CallRef(BaseModel):
    """One call to dispatch. A call is its history slot: the model's ids are not trusted to be
    unique, so dispatch, claims and results key on `seq`."""

    model_config = ConfigDict(frozen=True)
    seq: int = Field(description="History slot the result goes to.")
    message_seq: int = Field(description="History slot of the model reply that made the call.")
    tool: str
    timeout_seconds: int
    heartbeat_seconds: int
    # Set on every call of a turn with a gated call (`Decision.gated`), None otherwise, so an
    # ungated turn's state stays as small as before. Read by the gated Map's Choice.
    needs_approval: bool | None = None
    # How long a gated call waits for a person (`TimeoutSecondsPath`/`HeartbeatSecondsPath`).
    approval_timeout_seconds: int | None = None
    approval_heartbeat_seconds: int | None = None
    # A deferred tool's call ("human", "client"), answered from outside instead of dispatched;
    # "none" for the other calls of a gated turn (the Choice reads it on every call).
    deferred: Literal["human", "client", "none"] | None = None


class DecisionStatus(StrEnum):
    FINAL = "final"
    TOOL_CALLS = "tool_calls"
    LIMIT = "limit"
    FAILED = "failed"
    # The run goes on in a fresh execution (this one neared the history-event limit).
    CONTINUED = "continued"


class Decision(BaseModel):
    """What one model step returns to the state machine."""

    status: DecisionStatus
    turn: int
    calls: list[CallRef] = Field(default_factory=list)
    # Some call waits for a person (or a deferred answer): the turn takes the Map whose branches
    # can wait (the others keep the plain Map, and its transitions).
    gated: bool = False


class CallOutcome(BaseModel):
    """One Map branch's output: what the worker reported, or what the Catch caught."""

    seq: int
    status: Literal["ok", "error"]
    error: str | None = None


class StepRequest(BaseModel):
    """Orchestrator input for one model step."""

    action: Literal["step"] = "step"
    run_id: str
    results: list[CallOutcome] = Field(default_factory=list)
    # `$$.StateMachine.Id`: where a long run continues. From the execution's context, since
    # the orchestrator's own settings cannot name the state machine that names it.
    state_machine_arn: str | None = None
    execution: str | None = None  # `$$.Execution.Name`


class FailRequest(BaseModel):
    """Orchestrator input when the model step itself failed for good (the state machine's Catch)."""

    action: Literal["fail"]
    run_id: str
    error: dict[str, Any] = Field(default_factory=dict)


class ApprovalTaskRequest(BaseModel):
    """Orchestrator input from a gated call's `WaitForApproval` task: store the approval with
    the task token, which a person's decision answers. The token is a bearer credential."""

    action: Literal["request_approval"]
    # What the call waits for: a person's decision, or a deferred tool's answer (the Map
    # branch's `WaitForResult` sends the call's `deferred`).
    kind: Literal["approval", "human", "client"] = "approval"
    run_id: str = Field(max_length=128)
    seq: int = Field(ge=1, le=999_999)
    message_seq: int = Field(ge=1, le=999_999)
    task_token: str = Field(repr=False, max_length=8192)
    # When the waiting task started (`$$.State.EnteredTime`): its timeout counts from then, so
    # the approval's expiry does too. None from a definition older than the field.
    entered_at: datetime | None = None


class ToolCallMessage(BaseModel):
    """SQS body for one tool call. The task token is a bearer credential: never log it."""

    run_id: str = Field(max_length=128)
    seq: int = Field(ge=1, le=999_999)
    message_seq: int = Field(ge=1, le=999_999)
    task_token: str = Field(repr=False, max_length=8192)


# What a caller may send: every field bounded, so a request can neither fill the history item
# nor reach the system prompt with text of its choosing (the time zone is written into it).
NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"  # agent and tool names (OpenAI function names allow the same)
TIMEZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+){0,2}$"  # no dots: no "../" paths
# An idempotency key: printable ASCII without spaces, as the IETF draft's examples and Stripe's keys.
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"
MAX_PROMPT_CHARS = 100_000
# What Python's `str.strip()` removes (every character whose `isspace()` is true; a unit test
# re-measures it), as regex escapes: a text is blank when it has nothing else. A class of its
# own, not `\S`: the OpenAPI document's pattern then means the same in every regex dialect
# (ECMA's `\s` differs from Python's).
WHITESPACE = r"\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_BLANK_PATTERN = f"[^{WHITESPACE}]"
MAX_TOOLS = 128
MAX_RUN_MCP_SERVERS = 5
# Metadata is a few labels, stored in the run record (one DynamoDB item): bounded in count and size.
MAX_METADATA_ENTRIES = 16
METADATA_KEY_PATTERN = r"^[A-Za-z0-9_.:/-]{1,64}$"
MAX_METADATA_VALUE_CHARS = 256
MetadataValue = Annotated[str, Field(max_length=MAX_METADATA_VALUE_CHARS)]
MetadataKey = Annotated[str, Field(pattern=METADATA_KEY_PATTERN)]


class StartRunRequest(BaseModel):
    """The body of `POST /runs`. The caller is not a field: it is the request's identity."""

    model_config = ConfigDict(extra="forbid")
    # `prompt` is the field's former name, still accepted (deprecated).
    input: str = Field(
        max_length=MAX_PROMPT_CHARS,
        validation_alias=AliasChoices("input", "prompt"),
        description="The user's message; not blank. (`prompt` is accepted as a deprecated alias.)",
        json_schema_extra={"pattern": NOT_BLANK_PATTERN},  # checked by `_not_blank`, which words the error
    )
    agent: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="A registered agent's name; omitted, the app's first agent.",
    )
    timezone: str = Field(
        default="UTC", max_length=64, description="The user's IANA time zone, e.g. Europe/Paris."
    )
    tools: list[Annotated[str, Field(pattern=NAME_PATTERN)]] | None = Field(
        default=None,
        max_length=MAX_TOOLS,
        description="Allow-list: the run may use only these of the agent's tools.",
    )
    # `\S+` and a length, not `\S{1,2000}`: pydantic-core's regex engine compiles a counted
    # repetition of a Unicode class into a large automaton (17 ms of every cold start).
    mcp_servers: list[Annotated[str, Field(pattern=r"^https?://\S+$", max_length=2008)]] | None = Field(
        default=None,
        max_length=MAX_RUN_MCP_SERVERS,
        description="MCP server URLs (streamable HTTP) whose tools this run offers too, named mcp_<tool> "
        "(mcp1_, mcp2_... for several). Refused unless the deployment allows it "
        "(TOOLPIPE_ALLOW_RUN_MCP_SERVERS): the workers would call any URL a caller names.",
    )
    metadata: dict[MetadataKey, MetadataValue] | None = Field(
        default=None,
        max_length=MAX_METADATA_ENTRIES,
        description=f"Your own labels, stored with the run and returned by GET: at most "
        f"{MAX_METADATA_ENTRIES} entries, keys 1-64 of [A-Za-z0-9_.:/-], values at most "
        f"{MAX_METADATA_VALUE_CHARS} characters.",
    )

    @model_validator(mode="before")
    @classmethod
    def _caller_is_not_a_field(cls, data: Any) -> Any:
        # Before `extra="forbid"` answers "Extra inputs are not permitted": say where it comes from.
        if isinstance(data, dict) and "caller" in data:
            raise PydanticCustomError(
                "caller_from_identity",
                "caller is not a body field: the caller comes from the request's identity (IAM)",
            )
        return data

    @model_validator(mode="before")
    @classmethod
    def _one_name_for_the_input(cls, data: Any) -> Any:
        if isinstance(data, dict) and "input" in data and "prompt" in data:
            raise PydanticCustomError("input_twice", "send input or prompt (its deprecated name), not both")
        return data

    @field_validator("input")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not re.search(NOT_BLANK_PATTERN, value):
            raise PydanticCustomError("blank", "the input is blank")
        return text_safe(value)

    @field_validator("timezone")
    @classmethod
    def _iana_zone(cls, value: str) -> str:
        # The pattern comes first: ZoneInfo opens a file named after the key.
        if value != "UTC" and not re.fullmatch(TIMEZONE_PATTERN, value):
            raise PydanticCustomError(
                "timezone", "not an IANA time zone name (such as 'Europe/Paris' or 'UTC')"
            )
        if value != "UTC":  # UTC needs no tz database, which a Lambda runtime may lack
            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError, OSError) as e:
                raise PydanticCustomError(
                    "timezone",
                    "unknown time zone {zone} (use an IANA name such as 'Europe/Paris')",
                    {"zone": repr(value)},
                ) from e
        return value


# Why an execution ended outside the state machine's own Catch, as the run's error reads it.
_EXECUTION_ENDED_REASONS = {
    "ABORTED": "execution aborted (stopped outside the run)",
    "TIMED_OUT": "execution timed out (it passed the state machine's TimeoutSeconds)",
    "FAILED": "execution failed outside the model step (see its Step Functions history)",
}


class ExecutionEndedRequest(BaseModel):
    """Orchestrator input from the EventBridge rule on the state machine's execution status
    changes: an execution ended FAILED, TIMED_OUT or ABORTED, perhaps where no state of its
    own could record it (stopped by hand, the whole execution timed out)."""

    action: Literal["execution_ended"]
    execution: str = Field(description="The execution's name: the run id, or `<run_id>--<n>`.")
    status: Literal["FAILED", "TIMED_OUT", "ABORTED"]

    def reason(self) -> str:
        return _EXECUTION_ENDED_REASONS[self.status]


OrchestratorRequest = Annotated[
    StepRequest | FailRequest | ExecutionEndedRequest | ApprovalTaskRequest, Field(discriminator="action")
]
ORCHESTRATOR_REQUEST: TypeAdapter[OrchestratorRequest] = TypeAdapter(OrchestratorRequest)
