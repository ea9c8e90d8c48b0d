"""The runs API's response bodies, as pydantic models: what `docs/openapi.json` describes."""

from typing import Any

from pydantic import BaseModel, Field

from toolpipe.shared.costs.estimate import CostReport
from toolpipe.shared.messages import RunRecord, RunStatus, RunSummary
from toolpipe.shared.runs.report import ToolExecution


class Links(BaseModel):
    self: str
    messages: str | None = None


class RunStarted(BaseModel):
    """`202` to `POST /runs` (the same body again for a retry with the same Idempotency-Key)."""

    run_id: str
    status: RunStatus
    status_url: str = Field(description="Absolute URL of GET /runs/{run_id}: poll it.")
    links: Links


class RunCancelled(BaseModel):
    """`200` to `POST /runs/{run_id}/cancel`, the first time and every time after."""

    run_id: str
    status: RunStatus
    status_url: str


class RunResumed(BaseModel):
    """`202` to `POST /runs/{run_id}/resume` (the same body again for a retry with the same
    Idempotency-Key)."""

    run_id: str
    status: RunStatus
    execution: int = Field(description="The run's execution it goes on in.")
    status_url: str = Field(description="Absolute URL of GET /runs/{run_id}: poll it.")


class RunListItem(RunSummary):
    links: Links


class RunList(BaseModel):
    runs: list[RunListItem]
    next: str | None = Field(description="Pass as ?next= for the next page; null on the last one.")


class RunView(RunRecord):
    cost_usd: float
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


class MessagesPage(BaseModel):
    messages: list[dict[str, Any]] = Field(
        description="History items (kind user, assistant or tool_result), long fields as previews with `ref`."
    )
    next: str | None


class ErrorBody(BaseModel):
    statusCode: int
    message: str = Field(description="One line naming the field and what is wrong with it.")
