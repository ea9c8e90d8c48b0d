"""A run's history items: the user's input, the model's replies and the tools' results. Read by
the model step (the model's context), the runs API and the CLI; stored one per DynamoDB item."""

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
)

from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.messages.common import Usage, utc_now


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
    # When the model call began (`created_at` is when its reply was stored): the model call's
    # span and its bar on the timeline. None in items stored before it was recorded.
    started_at: str | None = None
    # The version of your app the step ran (a hash of its files: `toolpipe serve` reloads it
    # when they change); None when it has none, or in items stored before it was recorded.
    app_version: str | None = None


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
    # When the delivery that stored this result took the call (`created_at` is when it was
    # stored): the call's bar on the timeline. None where nothing ran it (a refusal by the model
    # step, a child run's answer) and in items stored before it was recorded.
    started_at: str | None = None
    # The version of your app the call's process ran; None where none ran it.
    app_version: str | None = None


HistoryItem = Annotated[UserMessage | AssistantMessage | ToolResult, Field(discriminator="kind")]
HISTORY_ITEM: TypeAdapter[HistoryItem] = TypeAdapter(HistoryItem)
