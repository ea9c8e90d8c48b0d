"""What happens to an approval: requested by a gated call's waiting task, decided once by a
person through the API, resolved by the next model step when the call was not dispatched."""

import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from toolpipe.shared.agents import run_agent
from toolpipe.shared.approvals.hashing import arguments_hash, canonical_json, tool_hash
from toolpipe.shared.approvals.links import ApprovalLinks
from toolpipe.shared.approvals.models import (
    ARGUMENTS_PREVIEW_CHARS,
    MAX_EDITED_ARGUMENTS_BYTES,
    Approval,
    ApprovalAlreadyDecidedError,
    ApprovalNotFoundError,
    ApprovalRunEndedError,
    ApprovalStatus,
    EditedArguments,
    InvalidEditError,
)
from toolpipe.shared.approvals.ports import ApprovalRecords, RunsAndHistory
from toolpipe.shared.errors import ErrorKind, ModelVisibleError, UnknownToolError
from toolpipe.shared.messages import (
    ApprovalTaskRequest,
    AssistantMessage,
    RunRecord,
    RunStatus,
    ToolCall,
    UserMessage,
    utc_now,
)
from toolpipe.shared.runs.events import NO_EVENTS, EventPublisher
from toolpipe.shared.tools import Tool

# The error a denial or an expiry answers the waiting task with; the state machine's Catch
# ends the branch without dispatching the call.
DENIED_ERROR = "ApprovalDenied"
EXPIRED_ERROR = "ApprovalExpired"


logger = logging.getLogger(__name__)


class ApprovalTasks(Protocol):
    """Answers a gated call's waiting task. Both return False when it no longer waits."""

    def succeed(self, token: str, output: dict[str, Any]) -> bool: ...

    def fail(self, token: str, error: str, cause: str) -> bool: ...


class ApprovalService:
    def __init__(
        self,
        approvals: ApprovalRecords,
        runs: RunsAndHistory,
        tasks: ApprovalTasks,
        admin_principal: str | None = None,
        *,
        timeout_seconds: int = 86_400,
        events: EventPublisher = NO_EVENTS,
        links: ApprovalLinks | None = None,
        api_url: str | None = None,
    ) -> None:
        """`links`: signs approval links (None: no link is made or accepted). `api_url`: the
        API's base URL the link of `ApprovalRequested` is made under (None: the event has none)."""
        self._approvals = approvals
        self._runs = runs
        self._tasks = tasks
        self._admin = admin_principal
        self._timeout = timeout_seconds
        self._events = events
        self.links = links
        self._api_url = api_url

    # --- the waiting task ---------------------------------------------------------------

    def request(self, request: ApprovalTaskRequest) -> Approval:
        """Store the call's approval with the waiting task's token, and announce it once. A task
        started again for a call already decided is answered at once with that decision."""
        run = self._runs.get_run(request.run_id)
        reply = self._runs.get_item(request.run_id, request.message_seq)
        index = request.seq - request.message_seq - 1
        if not isinstance(reply, AssistantMessage) or not 0 <= index < len(reply.tool_calls):
            raise ValueError(f"message_seq {request.message_seq} and seq {request.seq} name no call")
        call = reply.tool_calls[index]
        try:
            tool: Tool | None = run_agent(run).registry.get(call.name)
        except UnknownToolError:
            tool = None
        now = datetime.now(UTC)
        fresh = Approval(
            approval_id=uuid.uuid4().hex,
            run_id=run.run_id,
            seq=request.seq,
            message_seq=request.message_seq,
            turn=reply.turn,
            call_id=call.id,
            tool=call.name,
            tool_description="" if tool is None else tool.description,
            arguments_sha256=arguments_hash(call.arguments),
            arguments_preview=_preview(call.arguments),
            # The tool as the model saw it: the worker runs the approved call only if it is unchanged.
            tool_sha256=None if tool is None else tool_hash(tool),
            requester=run.caller,
            status=ApprovalStatus.PENDING,
            created_at=now.isoformat(timespec="milliseconds"),
            expires_at=(now + timedelta(seconds=self._timeout)).isoformat(timespec="milliseconds"),
        )
        stored = self._approvals.create(fresh, request.task_token)
        if stored.approval_id == fresh.approval_id:
            self._events.approval_requested(run, stored, self.callback_url(stored, self._api_url))
        elif stored.status is not ApprovalStatus.PENDING:
            self._answer(stored, request.task_token)
        return stored

    # --- a person's decision -------------------------------------------------------------

    def list(self, caller: str, status: ApprovalStatus | None) -> list[Approval]:
        """The caller's runs' approvals; the admin principal's answer holds everyone's."""
        return self._approvals.list(None if caller == self._admin else caller, status)

    def get(self, approval_id: str, caller: str) -> Approval:
        approval = self._approvals.get(approval_id)
        if caller != self._admin and caller != approval.requester:
            raise ApprovalNotFoundError(approval_id)  # as unknown: ids cannot be probed
        return approval

    def callback_url(self, approval: Approval, base_url: str | None) -> str | None:
        """The approval's signed link under `base_url`, or None without a key or a URL."""
        if self.links is None or not base_url:
            return None
        return self.links.url(base_url, approval)

    def decide(
        self,
        approval_id: str,
        caller: str,
        approve: bool,
        reason: str | None = None,
        arguments: str | None = None,
    ) -> Approval:
        """Record the caller's decision if it is the first, then answer the waiting task, once:
        only the write that moved the record from pending sends. Later decisions raise
        `ApprovalAlreadyDecidedError` and change nothing. `arguments` (JSON text): approve with
        these instead of the model's; `InvalidEditError`, nothing decided, when they do not pass
        the tool's validation."""
        return self._decide(self.get(approval_id, caller), caller, approve, reason, arguments)

    def record(self, approval_id: str) -> Approval:
        """The approval, for a holder of its signed link (who checks the link first)."""
        return self._approvals.get(approval_id)

    def decide_by_link(
        self,
        approval: Approval,
        source_ip: str | None,
        approve: bool,
        reason: str | None = None,
        arguments: str | None = None,
    ) -> Approval:
        """As `decide`, for a person holding the approval's signed link (checked by the caller):
        no IAM principal, so the decision is recorded as made by the link, from where."""
        return self._decide(
            approval, f"signed link ({source_ip or 'unknown address'})", approve, reason, arguments
        )

    def _decide(
        self, approval: Approval, by: str, approve: bool, reason: str | None, arguments: str | None
    ) -> Approval:
        approval_id = approval.approval_id
        if approval.status is ApprovalStatus.PENDING and approval.expires_at <= utc_now():
            # Past its time the call counts as denied, even if its task has not noticed yet.
            self._expire(approval)
            raise ApprovalAlreadyDecidedError(approval_id, ApprovalStatus.EXPIRED)
        edited: EditedArguments | None = None
        if approval.status is ApprovalStatus.PENDING:
            run = self._runs.get_run(approval.run_id)
            if run.status is not RunStatus.RUNNING:
                # Cancelled or failed while the call waited: its task is gone with the execution.
                self._expire(approval)
                raise ApprovalRunEndedError(approval_id, run.run_id, run.status.value)
            if approve and arguments is not None:
                edited = self._edited(approval, run, arguments)
        status = ApprovalStatus.APPROVED if approve else ApprovalStatus.DENIED
        decided = self._approvals.decide(approval, status, by, None if approve else reason, arguments=edited)
        try:
            delivered = self._answer(decided, self._approvals.get_token(approval_id))
        except Exception:
            # Not delivered (throttled, the network): the decision is taken back, so the
            # caller's retry can make it again; only the write that moved it sends.
            self._approvals.decide(decided, ApprovalStatus.PENDING, None, from_status=decided.status)
            raise
        if not delivered:
            # No task waits on this token now. Locally that is a restarted runtime whose resumed
            # execution will wait again and find the decision; on AWS, a task that timed out
            # first (README "Known gaps").
            logger.info("approval %s decided; no task waits on its token now", approval_id)
        return decided

    def _edited(self, approval: Approval, run: RunRecord, text: str) -> EditedArguments | None:
        """Arguments a person wrote, checked as the model step checks a model's: JSON, an
        object, at most 64 KiB, and passing the tool's own validation. None when they are the
        model's arguments after all (no edit to record or tell the model about)."""
        if len(text.encode("utf-8", "replace")) > MAX_EDITED_ARGUMENTS_BYTES:
            raise InvalidEditError(f"the arguments are larger than {MAX_EDITED_ARGUMENTS_BYTES // 1024} KiB")
        try:
            raw = json.loads(text)
            canonical = canonical_json(raw)
        except (ValueError, RecursionError) as e:
            raise InvalidEditError(f"the arguments are not valid JSON: {_one_line(str(e))}") from e
        if not isinstance(raw, dict):
            raise InvalidEditError("the arguments must be a JSON object")
        try:
            tool = run_agent(run).registry.get(approval.tool)
            tool.parse_arguments(canonical)
        except ModelVisibleError as e:
            raise InvalidEditError(_one_line(str(e))) from e
        sha256 = arguments_hash(canonical)
        if sha256 == approval.arguments_sha256:
            return None
        return EditedArguments(text=canonical, sha256=sha256)

    def call_of(self, approval: Approval) -> ToolCall | None:
        """The call as the model made it (its whole arguments), from the run's history."""
        reply = self._runs.get_item(approval.run_id, approval.message_seq)
        index = approval.seq - approval.message_seq - 1
        if not isinstance(reply, AssistantMessage) or not 0 <= index < len(reply.tool_calls):
            return None
        return reply.tool_calls[index]

    def run_input(self, approval: Approval) -> str | None:
        """What the run was asked (its first message), for a person deciding."""
        first = self._runs.get_item(approval.run_id, 1)
        return first.content if isinstance(first, UserMessage) else None

    def _answer(self, approval: Approval, token: str | None) -> bool:
        """Answer the waiting task; False when it no longer waits for this token."""
        if token is None:
            return True  # no task waits on a token (the call was decided before it was stored)
        if approval.status is ApprovalStatus.APPROVED:
            return self._tasks.succeed(token, {"approval_id": approval.approval_id, "status": "approved"})
        # The cause is not where the reason travels (moto drops it; AWS caps it): the next
        # model step reads the reason from the record.
        error = DENIED_ERROR if approval.status is ApprovalStatus.DENIED else EXPIRED_ERROR
        return self._tasks.fail(token, error, f"approval {approval.approval_id} {approval.status.value}")

    def _expire(self, approval: Approval) -> Approval:
        try:
            return self._approvals.decide(approval, ApprovalStatus.EXPIRED, None)
        except ApprovalAlreadyDecidedError:
            return self._approvals.get(approval.approval_id)

    # --- the next model step -------------------------------------------------------------

    def unanswered(self, run: RunRecord, seq: int) -> tuple[str, ErrorKind] | None:
        """The result a gated call that was never dispatched gets (denied, or expired: its
        record is marked so), or None for a call that was not gated or was approved."""
        gate = self._approvals.get_gate(run.run_id, seq)
        if gate is None:
            return None
        approval = self._approvals.get(gate.approval_id)
        if approval.status is ApprovalStatus.PENDING:
            approval = self._expire(approval)
        return unapproved_result(approval)


def unapproved_result(approval: Approval) -> tuple[str, ErrorKind] | None:
    """What the model reads for a call a person denied, or nobody decided in time."""
    if approval.status is ApprovalStatus.DENIED:
        return (
            f"Error: A person denied the call to '{approval.tool}'; it was not run. "
            f"Their reason: {approval.reason or '(none given)'}",
            ErrorKind.APPROVAL_DENIED,
        )
    if approval.status is ApprovalStatus.EXPIRED:
        return (
            f"Error: the call to '{approval.tool}' needed a person's approval and none came in time; "
            "it was not run.",
            ErrorKind.APPROVAL_EXPIRED,
        )
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def _preview(arguments: str) -> str:
    try:
        text = json.dumps(json.loads(arguments or "{}"), ensure_ascii=False)
    except (ValueError, RecursionError):
        text = arguments
    return text if len(text) <= ARGUMENTS_PREVIEW_CHARS else text[: ARGUMENTS_PREVIEW_CHARS - 1] + "…"
