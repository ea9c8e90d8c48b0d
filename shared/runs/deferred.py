"""What happens to a deferred call (an approval, a person's answer, a program's result):
requested by its call's waiting task, decided once through the API, resolved by the next model
step when the call was not dispatched. The records are `shared/deferred`'s."""

import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from toolpipe.shared.deferred.answers import answer_content, question_of, unapproved_result
from toolpipe.shared.deferred.bodies import ResultRequest
from toolpipe.shared.deferred.hashing import arguments_hash, tool_hash
from toolpipe.shared.deferred.links import ApprovalLinks, SigningKeyError
from toolpipe.shared.deferred.models import (
    ARGUMENTS_PREVIEW_CHARS,
    LINK_DECIDER,
    Approval,
    ApprovalAlreadyDecidedError,
    ApprovalKind,
    ApprovalNotFoundError,
    ApprovalRunEndedError,
    ApprovalStatus,
    DeferredCallNotFoundError,
    DeliveryFailedError,
    DeliveryUncertainError,
    EditedArguments,
    InvalidEditError,
    LinkEditsOffError,
    ToolChangedWhileWaitingError,
    WrongKindError,
)
from toolpipe.shared.deferred.ports import ApprovalRecords, ApprovalTasks, RunsAndHistory
from toolpipe.shared.errors import ErrorKind, error_text
from toolpipe.shared.messages import (
    ApprovalTaskRequest,
    AssistantMessage,
    HistoryItem,
    RunRecord,
    RunStatus,
    ToolCall,
    ToolResult,
    UserMessage,
    utc_now,
)
from toolpipe.shared.runs.catalog import AgentCatalog
from toolpipe.shared.runs.deferred_checks import edited_arguments, tool_changed
from toolpipe.shared.runs.events import NO_EVENTS, EventPublisher
from toolpipe.shared.runs.ports import certainly_not_sent
from toolpipe.shared.runs.recorder import ResultRecorder, whole_result
from toolpipe.shared.runs.results import fit_for_model
from toolpipe.shared.runs.tool_hooks import after_hooks
from toolpipe.shared.tools import Tool, ToolContext
from toolpipe.shared.tools.errors import UnknownToolError
from toolpipe.shared.tools.registry import Execution

# The error a denial or an expiry answers the waiting task with; the state machine's Catch
# ends the branch without dispatching the call.
DENIED_ERROR = "ApprovalDenied"
EXPIRED_ERROR = "ApprovalExpired"


logger = logging.getLogger(__name__)

# What the next model step writes for a waiting call whose task ended without an answer.
_ENDED_UNANSWERED = (ErrorKind.NOT_COMPLETED, ErrorKind.NO_ANSWER)


class DeferredCalls:
    """Every call that waits for something from outside its worker: a person's approval, a
    person's answer, a program's result. Requested by its waiting task, decided or answered
    once, resolved by the next model step when it was never dispatched."""

    def __init__(
        self,
        approvals: ApprovalRecords,
        runs: RunsAndHistory,
        tasks: ApprovalTasks,
        admin_principal: str | None = None,
        *,
        agents: AgentCatalog,
        timeout_seconds: int = 86_400,
        events: EventPublisher = NO_EVENTS,
        links: ApprovalLinks | None = None,
        api_url: str | None = None,
        link_edits: bool = False,
    ) -> None:
        """`agents`: where the calls' agents are found (as the model step finds them). `links`:
        signs approval links (None: no link is made or accepted). `api_url`: the API's base URL
        the link of `ApprovalRequested` is made under (None: the event has none). `link_edits`:
        a link may approve with edited arguments too (else only an authenticated caller may,
        through `decide`)."""
        self._approvals = approvals
        self._runs = runs
        self._tasks = tasks
        self._agents = agents
        self._admin = admin_principal
        self._timeout = timeout_seconds
        self._events = events
        self._results = ResultRecorder(runs, events)
        self.links = links
        self._api_url = api_url
        self.link_edits = link_edits

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
            tool: Tool | None = self._agents.in_run(run, reply.agent).registry.get(call.name)
        except UnknownToolError:
            tool = None
        kind = ApprovalKind(request.kind)
        deferred = kind is not ApprovalKind.APPROVAL
        # A deferred tool may wait its own time (`wait_seconds`); the state machine's task has the
        # same timeout, from the same tool (the model step's decision).
        timeout = tool.wait_timeout(self._timeout) if deferred and tool is not None else self._timeout
        schema = tool.result_schema if deferred and tool is not None else None
        now = datetime.now(UTC)
        # The task times out `timeout` after it started, before this Lambda ran: an expiry counted
        # from now would accept decisions Step Functions then refuses (`TaskTimedOut`).
        started = min(now, request.entered_at.astimezone(UTC)) if request.entered_at else now
        fresh = Approval(
            approval_id=uuid.uuid4().hex,
            run_id=run.run_id,
            seq=request.seq,
            message_seq=request.message_seq,
            turn=reply.turn,
            call_id=call.id,
            tool=call.name,
            agent=reply.agent or run.agent,
            tool_description="" if tool is None else tool.description,
            arguments_sha256=arguments_hash(call.arguments),
            arguments_preview=_preview(call.arguments),
            # The tool as the model saw it: the worker runs the approved call only if it is unchanged.
            tool_sha256=None if tool is None else tool_hash(tool),
            requester=run.caller,
            status=ApprovalStatus.PENDING,
            created_at=now.isoformat(timespec="milliseconds"),
            expires_at=(started + timedelta(seconds=timeout)).isoformat(timespec="milliseconds"),
            kind=kind,
            question=question_of(call.arguments) if kind is ApprovalKind.HUMAN else None,
            result_schema=schema if isinstance(schema, dict) else None,
        )
        stored = self._approvals.create(fresh, request.task_token)
        if stored.approval_id == fresh.approval_id and kind is ApprovalKind.CLIENT:
            self._events.tool_call_requested(run, stored, _arguments(call.arguments))
        elif stored.approval_id == fresh.approval_id:
            self._events.approval_requested(run, stored, self.callback_url(stored, self._api_url))
        elif stored.status is not ApprovalStatus.PENDING:
            self._answer(stored, request.task_token)
        elif stored.expires_at <= utc_now():
            # Its task started again (a restarted local runtime) after the call's time: it
            # would wait a whole timeout more for an answer the record refuses. Ends it now.
            stored = self._expire(stored)
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
        """The call's signed link under `base_url`, or None without a key or a URL. An approval's
        page approves or denies; a question's page takes the answer. A client-executed call has
        none: a program answers it."""
        if self.links is None or not base_url or approval.kind is ApprovalKind.CLIENT:
            return None
        try:
            return self.links.url(base_url, approval)
        except SigningKeyError as e:
            # A configuration error: the approval stands and is decided through the API; the
            # event and the API show no link until the key is fixed.
            logger.error("approval %s has no link: %s", approval.approval_id, e)
            return None

    def decide(
        self,
        approval_id: str,
        caller: str,
        approve: bool,
        reason: str | None = None,
        arguments: str | None = None,
        *,
        by: str | None = None,
    ) -> Approval:
        """Record the caller's decision if it is the first, then answer the waiting task, once:
        only the write that moved the record from pending sends. Later decisions raise
        `ApprovalAlreadyDecidedError` and change nothing. `arguments` (JSON text): approve with
        these instead of the model's; `InvalidEditError`, nothing decided, when they do not pass
        the tool's validation. `by`: who decided, when more precise than the caller (a role's
        session, where the caller is the role); the caller otherwise."""
        return self._decide(self.get(approval_id, caller), by or caller, approve, reason, arguments)

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
        """As `decide`, for whoever holds the approval's signed link (checked by the caller): no
        principal, so the decision is recorded as made by the link, from where. Arguments that
        differ from the model's raise `LinkEditsOffError` (nothing decided) unless link edits
        are on: a link is not an authenticated person."""
        return self._decide(
            approval, _by_link(source_ip), approve, reason, arguments, may_edit=self.link_edits
        )

    def _decide(
        self,
        approval: Approval,
        by: str,
        approve: bool,
        reason: str | None,
        arguments: str | None,
        *,
        may_edit: bool = True,
    ) -> Approval:
        approval_id = approval.approval_id
        if approval.kind is not ApprovalKind.APPROVAL:
            how = (
                f"POST /approvals/{approval_id}/answer"
                if approval.kind is ApprovalKind.HUMAN
                else f"POST /runs/{approval.run_id}/calls/{approval.seq}/result"
            )
            raise WrongKindError(f"{approval_id} waits for an answer, not a decision: {how}")
        if approve and arguments is not None and not may_edit:
            self._refuse_edit(approval, arguments)
        run = self._still_open(approval)
        edited: EditedArguments | None = None
        if approve and arguments is not None:
            try:
                # Checked on a decided call too: the same edit sent again is a retry, not a conflict.
                edited = self._edited(approval, run or self._runs.get_run(approval.run_id), arguments)
            except InvalidEditError:
                if run is not None:
                    raise
                raise ApprovalAlreadyDecidedError(approval_id, approval.status) from None
        status = ApprovalStatus.APPROVED if approve else ApprovalStatus.DENIED
        try:
            decided = self._approvals.decide(
                approval, status, by, None if approve else reason, arguments=edited
            )
        except ApprovalAlreadyDecidedError:
            current = self._approvals.get(approval_id)
            wanted = approval.link_arguments_sha256 if edited is None else edited.sha256
            if (
                current.status is not status
                or (approve and current.arguments_sha256 != wanted)
                or (not approve and current.reason != reason)  # another reason is another decision
            ):
                raise
            # The same decision again (a double click, or a retry after an uncertain delivery):
            # a 200, and the task is told again only when it may not have heard it.
            self._redeliver(current)
            return current
        self._deliver(decided, first=True)
        return decided

    def _refuse_edit(self, approval: Approval, arguments: str) -> None:
        """Raise `LinkEditsOffError` unless `arguments` are the model's after all (any spelling):
        checked before anything else, so the refusal is the same whatever the call's state."""
        try:
            same = self._edited(approval, self._runs.get_run(approval.run_id), arguments) is None
        except InvalidEditError:
            same = False  # not even arguments the tool takes: certainly not the model's
        if not same:
            raise LinkEditsOffError(approval.approval_id)

    def _redeliver(self, current: Approval) -> None:
        """The same decision again: tell the task again only if it may not have heard it, so a
        decided approval's task gets one SendTask* unless a delivery's outcome was unknown."""
        if current.delivery_uncertain:
            run = self._runs.get_run(current.run_id)
            if run.status is not RunStatus.RUNNING:
                # Its execution is gone: nothing can hear it now, whatever it heard before.
                raise ApprovalRunEndedError(current.approval_id, run.run_id, run.status.value)
            self._deliver(current, first=False)
            self._approvals.set_delivery_uncertain(current.approval_id, False)

    def _deliver(self, decided: Approval, first: bool) -> None:
        """Tell the waiting task `decided`'s outcome. When the request certainly did not take
        effect, the first decision (or answer) is taken back so the same request can make it
        again (`DeliveryFailedError`); when its outcome is unknown it stays recorded, since the
        task may have heard it (`DeliveryUncertainError`: the same decision again re-delivers)."""
        approval_id = decided.approval_id
        try:
            delivered = self._answer(decided, self._approvals.get_token(approval_id))
        except Exception as e:
            if first and certainly_not_sent(e):
                self._approvals.reopen(decided)
                logger.warning("approval %s not delivered, taken back: %s", approval_id, _error_name(e))
                raise DeliveryFailedError(approval_id) from e
            logger.error(
                "approval %s %s; delivery uncertain: %s", approval_id, decided.status.value, _error_name(e)
            )
            self._approvals.set_delivery_uncertain(approval_id, True)
            if first:  # the decision stands: its wait is over, whoever hears of it later
                self._events.wait_ended(self._runs, decided)
            raise DeliveryUncertainError(approval_id, decided.status) from e
        if first:
            self._events.wait_ended(self._runs, decided)
        if not delivered:
            # No task waits on this token now: already answered (a retry), a restarted local
            # runtime whose resumed execution will wait again and find the decision, or, on AWS,
            # a task that timed out first (README "Known gaps").
            logger.info("approval %s %s; no task waits on its token now", approval_id, decided.status.value)

    def _still_open(self, approval: Approval) -> RunRecord | None:
        """Raise the 409 for a pending call that no longer waits (past its time, or its run
        ended), marking it expired; a call that is not pending is left to the conditional write
        (None). Returns the run of a call that still waits."""
        if approval.status is not ApprovalStatus.PENDING:
            return None
        if approval.expires_at <= utc_now():
            # Past its time the call counts as denied (or unanswered), even if its task has not
            # noticed yet.
            self._expire(approval)
            raise ApprovalAlreadyDecidedError(approval.approval_id, ApprovalStatus.EXPIRED)
        run = self._runs.get_run(approval.run_id)
        if run.status is not RunStatus.RUNNING:
            # Cancelled or failed while the call waited: its task is gone with the execution.
            self._expire(approval)
            raise ApprovalRunEndedError(approval.approval_id, run.run_id, run.status.value)
        return run

    # --- a deferred call's answer ----------------------------------------------------------

    def answer(self, approval_id: str, caller: str, value: Any, *, by: str | None = None) -> Approval:
        """A person's answer to a human-input call (the page and `POST /approvals/{id}/answer`
        call this): checked against the call's result schema, recorded if it is the first (as
        answered `by`, else by the caller), written to the call's slot as its result, then the
        waiting task answered once. A later answer raises `ApprovalAlreadyDecidedError` and
        changes nothing."""
        return self._answer_question(self.get(approval_id, caller), by or caller, value)

    def answer_by_link(self, approval: Approval, source_ip: str | None, value: Any) -> Approval:
        """As `answer`, for a person holding the question's signed link (checked by the caller,
        the question page): recorded as answered by the link, from where."""
        return self._answer_question(approval, _by_link(source_ip), value)

    def _answer_question(self, approval: Approval, by: str, value: Any) -> Approval:
        if approval.kind is not ApprovalKind.HUMAN:
            raise WrongKindError(f"{approval.approval_id} is not a question for a person: it takes no answer")
        content = answer_content(approval.kind, approval.result_schema, value, "answer")
        return self._resolve(approval, by, content, None)

    def post_result(
        self, run_id: str, seq: int, caller: str, request: ResultRequest, *, by: str | None = None
    ) -> Approval:
        """The caller's program's result (or error) for the client-executed call in slot `seq`:
        as `answer`, for calls declared `deferred="client"`."""
        gate = self._approvals.get_gate(run_id, seq)
        try:
            approval = None if gate is None else self.get(gate.approval_id, caller)
        except ApprovalNotFoundError:
            approval = None
        if approval is None or approval.kind is not ApprovalKind.CLIENT or approval.run_id != run_id:
            raise DeferredCallNotFoundError(run_id, seq)
        if request.error is not None:
            return self._resolve(approval, by or caller, error_text(request.error), ErrorKind.CLIENT_ERROR)
        content = answer_content(approval.kind, approval.result_schema, request.result, "result")
        return self._resolve(approval, by or caller, content, None)

    def _resolve(self, approval: Approval, caller: str, content: str, error: ErrorKind | None) -> Approval:
        """The one path every deferred answer takes: still open, the tool unchanged, the first
        answer (conditional write), its result in the call's ledger slot, the task answered."""
        self._still_open(approval)
        run = self._runs.get_run(approval.run_id)
        if tool_changed(self._agents.in_run(run, approval.agent), approval):
            self._fail_changed(run, approval)
        try:
            decided = self._approvals.decide(approval, ApprovalStatus.ANSWERED, caller, answer=_cut(content))
        except ApprovalAlreadyDecidedError:
            current = self._approvals.get(approval.approval_id)
            if current.status is not ApprovalStatus.ANSWERED or self._slot_text(run, approval) != content:
                raise
            # The same answer again (a retry after an uncertain delivery): told again, once.
            self._redeliver(current)
            return current
        try:
            # The ledger slot of the call: the next model step reads it as a worker's result. A
            # slot already taken (a retry after a take-back) keeps the first result.
            stored = self._runs.get_item(run.run_id, approval.seq)
            if stored is None:
                recorded = self._results.record(run, self._result(run, approval, content, error))
                stored = None if recorded.written else recorded.result
            # The task timed out at the last instant and the next model step wrote the call's
            # ending first: this answer came too late, whatever the record said.
            late = isinstance(stored, ToolResult) and stored.error_type in _ENDED_UNANSWERED
            if not late:
                decided = self._first_result(decided, stored)
        except Exception:
            # Nothing told yet: taken back, so the caller's retry can answer again.
            self._approvals.reopen(decided)
            raise
        if late:
            expired = self._approvals.decide(
                decided, ApprovalStatus.EXPIRED, None, from_status=ApprovalStatus.ANSWERED
            )
            self._events.wait_ended(self._runs, expired)
            raise ApprovalAlreadyDecidedError(approval.approval_id, ApprovalStatus.EXPIRED)
        self._deliver(decided, first=True)
        return decided

    def _slot_text(self, run: RunRecord, approval: Approval) -> str | None:
        """The whole text of the result in the call's slot (None: no result there)."""
        stored = self._runs.get_item(run.run_id, approval.seq)
        return whole_result(self._runs, stored) if isinstance(stored, ToolResult) else None

    def _result(
        self, run: RunRecord, approval: Approval, content: str, error: ErrorKind | None
    ) -> ToolResult:
        """The answer as the call's result, cut to the agent's `max_result_chars` for the model
        (the whole in S3) exactly as a worker's result is."""
        agent = self._agents.in_run(run, approval.agent)
        outcome = Execution(content, "ok" if error is None else "error", 0, error)
        call = self.call_of(approval) if agent.hooks else None
        if call is not None:
            # The worker runs after_tool on every result it writes; an answer is this call's.
            context = ToolContext(run_id=run.run_id, agent=agent.name, call_id=call.id, caller=run.caller)
            outcome = after_hooks(agent, call, outcome, context)
        shown, ref, chars = fit_for_model(self._runs, agent, run.run_id, approval.seq, outcome.content)
        return ToolResult(
            seq=approval.seq,
            turn=approval.turn,
            call_id=approval.call_id,
            tool=approval.tool,
            content=shown,
            status=outcome.status,
            error_type=outcome.error_type,
            full_result_ref=ref,
            full_result_chars=chars,
        )

    def _first_result(self, answered: Approval, stored: HistoryItem | None) -> Approval:
        """The slot holds the result of an earlier answer whose delivery failed (and was taken
        back): that result is what the model reads, so the record shows it, not this one's."""
        if not isinstance(stored, ToolResult):
            return answered
        return self._approvals.decide(
            answered,
            ApprovalStatus.ANSWERED,
            answered.decided_by,
            answer=_cut(stored.content),
            from_status=ApprovalStatus.ANSWERED,
        )

    def _fail_changed(self, run: RunRecord, approval: Approval) -> None:
        """Fail closed: a deploy changed the tool while its call waited, so an answer to the old
        question (or schema) is not given to the new tool. The model reads why; the call expires."""
        expired = self._approvals.decide(approval, ApprovalStatus.EXPIRED, None)
        self._events.wait_ended(self._runs, expired)
        result = ToolResult(
            seq=approval.seq,
            turn=approval.turn,
            call_id=approval.call_id,
            tool=approval.tool,
            content=error_text(
                f"the tool '{approval.tool}' changed while its call waited for an answer; ask again."
            ),
            status="error",
            error_type=ErrorKind.TOOL_CHANGED,
        )
        self._results.record(run, result)
        self._answer(expired, self._approvals.get_token(approval.approval_id))
        raise ToolChangedWhileWaitingError(approval.approval_id, approval.tool)

    def _edited(self, approval: Approval, run: RunRecord, text: str) -> EditedArguments | None:
        """See `deferred_checks.edited_arguments`, for the agent that made the call in `run`."""
        agent = self._agents.in_run(run, approval.agent)
        return edited_arguments(approval, agent, text, lambda: self.call_of(approval))

    def run_ended(self, approval: Approval) -> RunStatus | None:
        """The status of the approval's run once it ended (cancelled, failed, ...), else None.
        Reads only: a page view must not mark the call expired."""
        run = self._runs.get_run(approval.run_id)
        return None if run.status is RunStatus.RUNNING else run.status

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
        if approval.status is ApprovalStatus.ANSWERED:
            # The branch's outcome, as a worker reports one: the result is in the call's slot.
            return self._tasks.succeed(token, {"seq": approval.seq, "status": "ok"})
        # The cause is not where the reason travels (moto drops it; AWS caps it): the next
        # model step reads the reason from the record.
        error = DENIED_ERROR if approval.status is ApprovalStatus.DENIED else EXPIRED_ERROR
        return self._tasks.fail(token, error, f"approval {approval.approval_id} {approval.status.value}")

    def _expire(self, approval: Approval) -> Approval:
        try:
            expired = self._approvals.decide(approval, ApprovalStatus.EXPIRED, None)
        except ApprovalAlreadyDecidedError:
            return self._approvals.get(approval.approval_id)
        self._events.wait_ended(self._runs, expired)
        return expired

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


def _arguments(arguments: str) -> dict[str, Any]:
    """The call's arguments as sent (the model step validated them): what a program runs on."""
    try:
        value = json.loads(arguments or "{}")
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _by_link(source_ip: str | None) -> str:
    """Who decided or answered through a signed link: no principal, whoever held the link, from
    where (the request's source address as API Gateway saw it)."""
    return f"{LINK_DECIDER} ({source_ip or 'unknown address'})"


def _cut(text: str) -> str:
    """What a record keeps of arguments or an answer: their beginning."""
    return text if len(text) <= ARGUMENTS_PREVIEW_CHARS else text[: ARGUMENTS_PREVIEW_CHARS - 1] + "…"


def _error_name(error: BaseException) -> str:
    """What went wrong, by name only: an AWS message may quote the request, and the request
    holds the task token, which no log line may."""
    if isinstance(error, ClientError):
        return str(error.response.get("Error", {}).get("Code") or type(error).__name__)
    return type(error).__name__


def _preview(arguments: str) -> str:
    try:
        text = json.dumps(json.loads(arguments or "{}"), ensure_ascii=False)
    except (ValueError, RecursionError):
        text = arguments
    return _cut(text)
