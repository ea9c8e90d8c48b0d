"""The small contracts that travel through Step Functions and SQS (ids only, never message
contents): the state machine's input, the model step's decision, the orchestrator's requests and
the tool queue's message. Read by the orchestrator, the worker and the state machine definition."""

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
)

from toolpipe.shared.messages.common import MaxDurationWaits


class ExecutionInput(BaseModel):
    """The whole input of a state machine execution: a reference, never the conversation."""

    run_id: str
    # When the run's max_duration passes (RFC 3339, UTC): the state machine's timer waits for it.
    deadline: str | None = None
    # "exclude": at the deadline the timer asks the orchestrator for the run's active time
    # (`DeadlineCheckRequest`) instead of ending the run. Always sent: the timer's Choice reads it.
    max_duration_waits: MaxDurationWaits = "count"


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
    # How long a gated call waits for a person (`TimeoutSecondsPath`). No heartbeat: nothing
    # beats while a person decides, and AWS requires a heartbeat shorter than the timeout.
    approval_timeout_seconds: int | None = None
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
    # The model's rate limit: the state machine waits `wait_seconds` (a Wait state, no Lambda
    # running), then asks for the model step again (shared/runs/rate_governor.py).
    WAIT = "wait"


class Decision(BaseModel):
    """What one model step returns to the state machine."""

    status: DecisionStatus
    turn: int
    calls: list[CallRef] = Field(default_factory=list)
    # Some call waits for a person (or a deferred answer): the turn takes the Map whose branches
    # can wait (the others keep the plain Map, and its transitions).
    gated: bool = False
    # `wait`: how long the state machine waits before the next model step (`SecondsPath`).
    wait_seconds: int | None = None


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
    # The execution that ended, when the execution-status rule sent it (None: the state
    # machine's own Catch, in the run's current execution).
    execution: int | None = None


class OutOfTimeRequest(BaseModel):
    """Orchestrator input when the run's deadline passed (the state machine's timer): answer its
    calls in flight as not completed and end it `limit`."""

    action: Literal["out_of_time"]
    run_id: str


class DeadlineCheckRequest(BaseModel):
    """Orchestrator input from the timer of a run whose waits for people do not count
    (`max_duration_waits="exclude"`): has its active time passed `max_duration`? If not, when to
    look again (shared/runs/active_time.py)."""

    action: Literal["check_deadline"]
    run_id: str
    execution: str  # `$$.Execution.Name`: its checks count in that execution's event budget


class DeadlineCheck(BaseModel):
    """The orchestrator's answer to the timer: the run is past its limit (`passed`), or the
    timer waits until `next` (RFC 3339, UTC) and asks again."""

    passed: bool
    next: str | None = None


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


_EXECUTION_ENDED_REASONS = {
    "SUCCEEDED": "execution succeeded",
    "ABORTED": "execution aborted (stopped outside the run)",
    "TIMED_OUT": "execution timed out (it passed the state machine's TimeoutSeconds)",
    "FAILED": "execution failed outside the model step (see its Step Functions history)",
}


class ExecutionEndedRequest(BaseModel):
    """Orchestrator input from the EventBridge rule on the state machine's execution status
    changes: an execution ended. Its transitions are counted; one that ended FAILED, TIMED_OUT or
    ABORTED, perhaps where no state of its own could record it (stopped by hand, the whole
    execution timed out), fails its run."""

    action: Literal["execution_ended"]
    execution: str = Field(description="The execution's name: the run id, or `<run_id>--<n>`.")
    status: Literal["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"]
    # Where its history is read, to count its state transitions (shared/costs/transitions.py).
    # Absent in an event the rule sent before it passed the ARN on: nothing is counted then.
    execution_arn: str | None = None

    def reason(self) -> str:
        return _EXECUTION_ENDED_REASONS[self.status]


OrchestratorRequest = Annotated[
    StepRequest
    | FailRequest
    | ExecutionEndedRequest
    | ApprovalTaskRequest
    | OutOfTimeRequest
    | DeadlineCheckRequest,
    Field(discriminator="action"),
]
ORCHESTRATOR_REQUEST: TypeAdapter[OrchestratorRequest] = TypeAdapter(OrchestratorRequest)
