"""What the HTTP API takes and answers about deferred calls: the bodies of a decision, an answer
and a program's result, and the approval as a caller reads it. Apart from the record
(`models.py`), which the functions that only store and read approvals import without these."""

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from toolpipe.shared.deferred.models import MAX_REASON_CHARS, Approval


class DenyRequest(BaseModel):
    """`POST /approvals/{id}/deny`."""

    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=MAX_REASON_CHARS, description="Why: the model reads it.")


class ApproveRequest(BaseModel):
    """`POST /approvals/{id}/approve`, optional: approve with other arguments than the model's."""

    model_config = ConfigDict(extra="forbid")
    arguments: dict[str, Any] | None = Field(
        default=None,
        description="Arguments to run the call with instead of the model's: checked against the "
        "tool's schema, at most 64 KiB as JSON. The model is told they were changed.",
    )


class ApprovalView(Approval):
    """An approval as the API answers it: edited `arguments` as the object they are (stored as
    canonical JSON text), the same type `ApproveRequest.arguments` takes."""

    arguments: dict[str, Any] | None = Field(  # type: ignore[assignment]  # the stored text, parsed
        default=None,
        description="The arguments a person edited before approving: the call runs with these, and "
        "`arguments_sha256` is theirs. Null when the call runs as the model sent it.",
    )

    @classmethod
    def of(cls, approval: Approval, callback_url: str | None) -> "ApprovalView":
        shown = approval.model_dump(exclude={"decided_by_authenticated"})
        edited = None if approval.arguments is None else json.loads(approval.arguments)
        return cls.model_validate(shown | {"arguments": edited, "callback_url": callback_url})


class ApprovalList(BaseModel):
    approvals: list[ApprovalView]


class ApprovalDecided(BaseModel):
    approval_id: str
    status: Literal["approved", "denied"]
    run_id: str


class AnswerRequest(BaseModel):
    """`POST /approvals/{id}/answer`: a person's answer to a human-input call."""

    model_config = ConfigDict(extra="forbid")
    answer: Any = Field(
        description="Free text (a string), or, when the call has a `result_schema`, a JSON value "
        "matching it. What the model reads as the call's result."
    )


class ResultRequest(BaseModel):
    """`POST /runs/{run_id}/calls/{call_id}/result` (`call_id`: the call's slot): the result of a client-executed call, or the
    error the model should read instead (exactly one of the two)."""

    # `_one_of` as the JSON schema states it: `result` (any JSON, null included) or a string `error`.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {"required": ["result"], "not": {"required": ["error"], "properties": {"error": {}}}},
                {
                    "required": ["error"],
                    "not": {"required": ["result"], "properties": {"result": {}}},
                    "properties": {"error": {"type": "string"}},
                },
            ]
        },
    )
    result: Any = Field(
        default=None,
        description="Any JSON (a string is passed as is); matches the tool's `result_schema` if it has one.",
    )
    error: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_REASON_CHARS,
        description="What went wrong, for the model to read.",
    )

    @model_validator(mode="after")
    def _one_of(self) -> "ResultRequest":
        if ("result" in self.model_fields_set) == (self.error is not None):
            raise ValueError("give exactly one of result and error")
        return self


class CallAnswered(BaseModel):
    approval_id: str
    status: Literal["answered"]
    run_id: str
    seq: int
