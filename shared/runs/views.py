"""The runs API's response bodies, as pydantic models: what `docs/openapi.json` describes."""

from typing import Annotated, Literal

from pydantic import BaseModel, Field, RootModel

from toolpipe.shared.costs.estimate import CostReport
from toolpipe.shared.deferred.models import WAITING_FOR_DESCRIPTION, WaitingFor
from toolpipe.shared.messages import (
    AssistantMessage,
    RunRecord,
    RunStatus,
    RunSummary,
    ToolResult,
    UserMessage,
)
from toolpipe.shared.runs.report import ToolExecution


class Links(BaseModel):
    self: str
    messages: str | None = None


class RunStarted(BaseModel):
    """`202` to `POST /runs`. A retry with the same Idempotency-Key gets the same run, as it is
    now (its current status), with `Idempotent-Replayed: true`."""

    run_id: str
    status: RunStatus
    agent: str = Field(
        description="The agent the run started with, as its record's `agent`: the one asked for, else "
        "the app's first; a fork's, its run's. A handoff moves a run on (`active_agent`)."
    )
    status_url: str = Field(description="Absolute URL of GET /runs/{run_id}: poll it.")
    links: Links


class RunCancelled(BaseModel):
    """`200` to `POST /runs/{run_id}/cancel`, the first time and every time after."""

    run_id: str
    status: RunStatus
    status_url: str


class RunResumed(BaseModel):
    """`202` to `POST /runs/{run_id}/resume`. A retry with the same Idempotency-Key starts
    nothing and gets the run as it is now (its current status and execution, later ones if it
    was resumed again since), with `Idempotent-Replayed: true`."""

    run_id: str
    status: RunStatus
    execution: int = Field(description="The run's execution it goes on in.")
    status_url: str = Field(description="Absolute URL of GET /runs/{run_id}: poll it.")


class RunListItem(RunSummary):
    links: Links
    waiting_for: WaitingFor | None = Field(default=None, description=WAITING_FOR_DESCRIPTION)


class RunList(BaseModel):
    runs: list[RunListItem]
    next: str | None = Field(description="Pass as ?next= for the next page; null on the last one.")


class RunView(RunRecord):
    cost_usd: float
    waiting_for: WaitingFor | None = Field(default=None, description=WAITING_FOR_DESCRIPTION)
    output_url: str | None = Field(default=None, description="Presigned GET of the whole answer, when long.")


class RunDetail(BaseModel):
    run: RunView
    executions: list[ToolExecution] = Field(description="One page of the run's tool calls, in call order.")
    executions_next: str | None
    links: Links
    cost: CostReport = Field(
        description="What the run cost: the model's tokens (`model_usd`, as `run.cost_usd`) and the "
        "AWS operations it made (`infra_usd`), counted as they were made and priced by the stack's "
        "price table. This run only: a child run reports its own."
    )


class Shown(BaseModel):
    """What the API adds to a history item it shows (`report.message_preview`, `RunReader.message`)."""

    truncated: dict[str, int] | None = Field(
        default=None,
        description="The fields cut to a preview: each one's dotted path and its whole length "
        "(characters, or entries of a list or object). Absent when nothing was cut.",
    )
    ref: str | None = Field(
        default=None, description="Where the whole item is (`GET /runs/{run_id}/messages/{seq}`), when cut."
    )
    url: str | None = Field(
        default=None,
        description="`GET /runs/{run_id}/messages/{seq}` of an item too large for a response: a "
        "presigned GET of the whole stored item (the rest is a preview).",
    )
    url_expires_in: int | None = Field(default=None, description="Seconds `url` stays valid.")


# The kind is always sent: required here (the stored models default it), so a generated client
# reads it as the union's discriminator.
class UserMessageView(UserMessage, Shown):
    """The user's input (turn 0), or toolpipe's request that the model fix its answer (`repair`)."""

    kind: Literal["user"]


class AssistantMessageView(AssistantMessage, Shown):
    """A model reply: its text, the tool calls it made (arguments as the model sent them: JSON text)."""

    kind: Literal["assistant"]


class ToolResultView(ToolResult, Shown):
    """A tool call's result (`seq` is the call's slot), as the model read it."""

    kind: Literal["tool_result"]


# One history item as the API shows it: discriminated by `kind`.
HistoryItemView = Annotated[
    UserMessageView | AssistantMessageView | ToolResultView, Field(discriminator="kind")
]


class HistoryEntry(RootModel[HistoryItemView]):
    """One whole history item: `200` to `GET /runs/{run_id}/messages/{seq}`."""

    # A model of its own: Powertools names a model as a response, not a bare union.


class MessagesPage(BaseModel):
    messages: list[HistoryItemView] = Field(
        description="History items in order, long fields as previews (`truncated`, `ref`)."
    )
    next: str | None = Field(
        description="The next page's path (`after` and `limit` set); null on the last one."
    )


class ErrorBody(BaseModel):
    statusCode: int
    message: str = Field(description="One line naming the field and what is wrong with it.")
