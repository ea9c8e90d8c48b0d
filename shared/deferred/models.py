"""The approval record (never the task token), the gate beside its call, and what deciding one
may refuse. What the API takes and answers about them is in `bodies.py`."""

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from toolpipe.shared.errors import ConflictError, NotFoundError, ToolpipeError

APPROVAL_ID_PATTERN = r"^[0-9a-f]{32}$"
# What a person writes when denying: bounded, since the model reads it as the call's result.
MAX_REASON_CHARS = 1_000
# What the record, the API and the event show of the arguments; the whole are in the run's history.
ARGUMENTS_PREVIEW_CHARS = 500
# Arguments a person edits before approving: bounded, since they are stored on the approval and
# its gate (DynamoDB items stop at 400 KB) and sent to the tool. 64 KiB of UTF-8 JSON.
MAX_EDITED_ARGUMENTS_BYTES = 64 * 1024


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    # A deferred call's answer (a person's, or the caller's program's result) was recorded.
    ANSWERED = "answered"


class ApprovalKind(StrEnum):
    """What a waiting call waits for: a person's decision (`requires_approval`), a person's
    answer (`deferred="human"`) or the caller's program's result (`deferred="client"`)."""

    APPROVAL = "approval"
    HUMAN = "human"
    CLIENT = "client"


# Who a running run waits for (`GET /runs/{id}`, `GET /runs`, the run events): a person (an
# approval or a question) or the caller's program (a client-executed call's result).
WaitingFor = Literal["person", "program"]
WAITING_FOR_DESCRIPTION = (
    "Who the running run waits for: `person` (a call to approve or deny, or a question to "
    "answer: `GET /approvals?status=pending`), `program` (a client-executed call's result, "
    "`POST /runs/{run_id}/calls/{call_id}/result`); null when it waits for neither, or ended."
)


# A deferred call's answer, as JSON: what the model reads, bounded (the history item stays well
# under DynamoDB's 400 KB, the request under API Gateway's 10 MB).
MAX_ANSWER_CHARS = 64 * 1024
# What the record, the inbox and the event show of the question a human-input call asks.
QUESTION_CHARS = 2_000


# `decided_by` of a decision (or answer) made through the signed link: there is no principal, only
# whoever held the link, and where from. Records written before it say `signed link (<IP>)`.
LINK_DECIDER = "signed link holder, not authenticated"
_LINK_DECIDERS = ("signed link",)


class Approval(BaseModel):
    """One call waiting for (or decided by) a person, or, for a deferred tool, for its answer
    (`kind`). Stored as `pk=APPROVAL#<id>`; its task token is a separate item that no view reads."""

    model_config = ConfigDict(frozen=True)
    approval_id: str = Field(description="Random id (32 hex digits).")
    run_id: str
    seq: int = Field(ge=1, description="The call's history slot: with `run_id`, names the call.")
    message_seq: int = Field(ge=1, description="The slot of the model reply that made the call.")
    turn: int = Field(ge=0)
    call_id: str = Field(description="The call's id, as the model was shown it.")
    tool: str = Field(description="The tool's name, as the model called it.")
    tool_description: str = ""
    arguments_sha256: str = Field(description="SHA-256 of the canonical JSON of the exact arguments.")
    arguments_preview: str = Field(description="The arguments' JSON, cut at 500 characters.")
    tool_sha256: str | None = Field(
        default=None,
        description="SHA-256 of the tool's definition (name, description, parameters) when the call "
        "started to wait: an approved call whose tool changed meanwhile is not run. Null on "
        "approvals stored before it was kept.",
    )
    requester: str | None = Field(description="The principal that started the run: who may decide.")
    status: ApprovalStatus
    created_at: str
    expires_at: str = Field(description="When an undecided call stops waiting and counts as denied.")
    decided_by: str | None = Field(
        default=None,
        description="Who decided (or answered): the principal the API authenticated (IAM: the "
        f"signer's ARN, a role's session), or `{LINK_DECIDER} (<source IP>)` for the approval page, "
        "whose signed link anyone holding it may use.",
    )
    decided_at: str | None = None
    reason: str | None = Field(default=None, description="The person's reason for a denial.")
    kind: ApprovalKind = Field(
        default=ApprovalKind.APPROVAL,
        description="`approval` (approve or deny), `human` (answer the question: `POST "
        "/approvals/{id}/answer`) or `client` (the caller's program posts the result: `POST "
        "/runs/{run_id}/calls/{call_id}/result`, `call_id` being `seq`).",
    )
    question: str | None = Field(
        default=None,
        description="A human-input call's question: its `question` argument, else its arguments' "
        "JSON (cut at 2,000 characters).",
    )
    result_schema: dict[str, Any] | None = Field(
        default=None,
        description="The JSON Schema the answer must match (a form); null: free text (`human`) or "
        "any JSON (`client`).",
    )
    answer_preview: str | None = Field(default=None, description="The answer's first 500 characters.")
    delivery_uncertain: bool | None = Field(
        default=None,
        description="True while it is unknown whether the waiting task heard the decision (the "
        "request to Step Functions failed with an unknown outcome): the same decision again "
        "tells it again. Otherwise the same decision again is answered without telling it twice.",
    )
    arguments: str | None = Field(
        default=None,
        description="The arguments a person edited before approving (canonical JSON): the call runs "
        "with these, and `arguments_sha256` is theirs. Null when the call runs as the model sent it.",
    )
    requested_arguments_sha256: str | None = Field(
        default=None,
        description="When the arguments were edited: the hash of the ones the model sent (what the "
        "approval link is bound to).",
    )
    callback_url: str | None = Field(
        default=None,
        description='The signed approval link (README "The approval link"): the page approves or '
        "denies, or, for a `human` call, takes the answer; null for a `client` call. Only in answers "
        "to the run's caller or the admin, never stored.",
    )
    agent: str | None = Field(
        default=None,
        description="The agent whose call it is (a run handed from agent to agent has several); "
        "null on approvals stored before it was kept.",
    )

    @computed_field(  # type: ignore[prop-decorator]
        description="True when `decided_by` is a principal the API authenticated; false when the "
        "decision came through the signed link (whoever held it); null when nobody decided."
    )
    @property
    def decided_by_authenticated(self) -> bool | None:
        if self.decided_by is None:
            return None
        return not self.decided_by.startswith(_LINK_DECIDERS)

    @property
    def link_arguments_sha256(self) -> str:
        """The hash the approval link is bound to: the model's arguments, edited or not."""
        return self.requested_arguments_sha256 or self.arguments_sha256


class EditedArguments(BaseModel):
    """Arguments a person approved instead of the model's: canonical JSON and its SHA-256."""

    model_config = ConfigDict(frozen=True)
    text: str
    sha256: str


class Gate(BaseModel):
    """The call's entry beside the tool ledger (`pk=RUN#<id>`, `sk=GATE#<seq>`): which approval
    holds it and what was approved. The worker reads it before it runs the call."""

    model_config = ConfigDict(frozen=True)
    approval_id: str
    arguments_sha256: str
    status: ApprovalStatus
    # The tool's definition when the call started to wait (None: a gate stored before it was kept).
    tool_sha256: str | None = None
    # The arguments a person edited before approving (canonical JSON; `arguments_sha256` is
    # theirs): the worker runs exactly these. None: the model's arguments, as sent.
    arguments: str | None = None

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> "Gate":
        """The gate as DynamoDB stores it (`sk=GATE#<seq>`)."""
        tool_sha256, arguments = item.get("tool_sha256"), item.get("arguments")
        return cls(
            approval_id=str(item["approval_id"]),
            arguments_sha256=str(item["arguments_sha256"]),
            status=ApprovalStatus(str(item["status"])),
            tool_sha256=None if tool_sha256 is None else str(tool_sha256),
            arguments=None if arguments is None else str(arguments),
        )


def waiting_for(pending: "list[Approval]") -> WaitingFor | None:
    """Who a run with these calls pending waits for: a person first, as nothing goes on without
    them, while a program may answer at any time."""
    kinds = {approval.kind for approval in pending}
    if kinds & {ApprovalKind.APPROVAL, ApprovalKind.HUMAN}:
        return "person"
    return "program" if ApprovalKind.CLIENT in kinds else None


class InvalidAnswerError(ToolpipeError):
    """An answer that does not fit the call (schema, size, kind): a 400, nothing changed."""


class WrongKindError(ConflictError):
    """An approve/deny on a deferred call, or an answer to an approval: a 409, nothing changed."""


class InvalidEditError(ToolpipeError):
    """Edited arguments that cannot be approved (not JSON, not an object, too large, or failing
    the tool's own validation): nothing is decided."""


class LinkEditsOffError(ToolpipeError):
    """Edited arguments from a signed link where link edits are off (a 403): whoever holds a link
    is not an authenticated person; nothing is decided."""

    def __init__(self, approval_id: str) -> None:
        super().__init__(
            "editing the arguments needs an authenticated approver: approve or deny them as they "
            f"are here, or use toolpipe approve {approval_id} --arguments '{{…}}' (the authenticated API)"
        )


class ApprovalNotFoundError(NotFoundError):
    def __init__(self, approval_id: str) -> None:
        super().__init__(f"approval {approval_id} not found")
        self.approval_id = approval_id


class DeferredCallNotFoundError(NotFoundError):
    """No call of the run waits for a result at that slot, or the run is not the caller's (the
    same 404: ids cannot be probed)."""

    def __init__(self, run_id: str, seq: int) -> None:
        super().__init__(f"run {run_id} has no call {seq} waiting for a result")


class ApprovalAlreadyDecidedError(ConflictError):
    """A decision came after the first one (or after the call expired): nothing changed.
    `status`: the one the call is in now."""

    def __init__(self, approval_id: str, status: ApprovalStatus, message: str | None = None) -> None:
        super().__init__(
            message or f"approval {approval_id} is already {status.value}: the first decision stands"
        )
        self.approval_id = approval_id
        self.status = status


class ApprovalRunEndedError(ApprovalAlreadyDecidedError):
    """The call's run ended (cancelled, failed) while the call waited: nothing waits for a
    decision any more. The approval is marked expired."""

    def __init__(self, approval_id: str, run_id: str, run_status: str) -> None:
        why = f"run {run_id} already ended ({run_status}): approval {approval_id} no longer waits"
        super().__init__(approval_id, ApprovalStatus.EXPIRED, why)


class ToolChangedWhileWaitingError(ApprovalAlreadyDecidedError):
    """The tool changed (a deploy) while its call waited: the answer was for the old one. The
    model was told so; the call is expired."""

    def __init__(self, approval_id: str, tool: str) -> None:
        why = f"the tool '{tool}' changed while call {approval_id} waited: the model was told to ask again"
        super().__init__(approval_id, ApprovalStatus.EXPIRED, why)


class DeliveryFailedError(ToolpipeError):
    """The run could not be told (throttled, refused, no connection) and certainly was not: the
    decision was taken back, nothing is decided. A 503; the same request again may succeed."""

    def __init__(self, approval_id: str) -> None:
        super().__init__(
            f"approval {approval_id} is not decided: its run could not be told (the service refused "
            "or could not be reached); nothing was recorded, send the decision again"
        )
        self.approval_id = approval_id


class DeliveryUncertainError(ToolpipeError):
    """The decision is recorded, but whether the run heard it is unknown (a timeout or a
    connection lost after sending). A 503; sending the same decision again delivers it, once."""

    def __init__(self, approval_id: str, status: ApprovalStatus) -> None:
        super().__init__(
            f"approval {approval_id} is recorded {status.value}, but whether its run was told is "
            "uncertain: send the same decision again to deliver it"
        )
        self.approval_id = approval_id
        self.status = status
