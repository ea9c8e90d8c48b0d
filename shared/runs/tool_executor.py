"""One tool call from the queue, exactly once: claim it, run it (or hand it to a child run),
persist the outcome, answer the waiting Step Functions task.

The order is the contract. Once a tool has returned, its outcome is persisted (result, ledger
DONE and the tool's state changes, in one transaction) before the task is answered, so no
redelivery or retry runs it again: a redelivery that finds the result answers from it. A
delivery that finds the call claimed by one that vanished cannot know whether the tool had
its effect: an `idempotent` tool runs again, any other ends "in doubt", never silently twice.
"""

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from toolpipe.shared.agents import Agent, get_agent, reply_agent
from toolpipe.shared.agents.app import child_waits
from toolpipe.shared.agents.errors import UnknownAgentError
from toolpipe.shared.deferred.hashing import arguments_hash, tool_hash
from toolpipe.shared.deferred.models import ApprovalStatus, Gate
from toolpipe.shared.errors import ErrorKind, ModelVisibleError, describe_exception, error_text
from toolpipe.shared.history import CallRead, Claim, ClaimState, HistoryStore
from toolpipe.shared.messages import (
    AssistantMessage,
    CallOutcome,
    HandoffAction,
    RunRecord,
    RunStatus,
    ToolCall,
    ToolCallMessage,
    ToolResult,
    text_safe,
    utc_now,
)
from toolpipe.shared.runs import children
from toolpipe.shared.runs.errors import CallInProgressError
from toolpipe.shared.runs.events import NO_EVENTS, EventPublisher
from toolpipe.shared.runs.handoffs import allowed_tools, transfer_refusal
from toolpipe.shared.runs.ports import ExecutionStarter, TaskReporter
from toolpipe.shared.runs.results import fit_for_model, unstored_preview
from toolpipe.shared.runs.tool_hooks import before_hooks
from toolpipe.shared.runs.tool_run import (
    STATE_LIMIT_BYTES,
    ApprovedCall,
    InProcessToolRunner,
    ToolRunner,
    ToolRunRequest,
    not_approved,
    policy_refusal,
)
from toolpipe.shared.tools import Execution, Tool, ToolContext
from toolpipe.shared.tools.errors import UnknownToolError
from toolpipe.shared.tools.time_limit import Overran, run_with_limit

logger = logging.getLogger(__name__)

# Writing the outcome is retried in-process before giving up: the tool has run, and a failed
# invocation would leave the call in doubt.
PERSIST_ATTEMPTS = 3
PERSIST_BACKOFF_SECONDS = 0.2
START_BEAT_DELAYS = (0.0, 0.05, 0.1, 0.2, 0.4, 0.8)
# What a call keeps of its invocation's time after the tool (storing the outcome, with its
# retries and the upload of a long result; answering the task): the tool and its hooks get the
# rest, and a tool that hangs ends as a timeout the model reads, not as an invocation killed
# with the call in doubt.
RESERVE_SECONDS = 10.0
# The least a tool is given, however little time the invocation has left.
MIN_TOOL_SECONDS = 1.0


@dataclass
class _Call:
    """A claimed call and what it needs to run."""

    message: ToolCallMessage
    claim: Claim
    run: RunRecord
    agent: Agent
    reply: AssistantMessage
    call: ToolCall
    tool: Tool | None  # None: not one of the agent's tools (the registry answers with an error)
    gate: Gate | None = None  # the call's approval, if it needed one
    started_at: str | None = None  # when this delivery took the call


class ToolCallExecutor:
    def __init__(
        self,
        store: HistoryStore,
        reporter: TaskReporter,
        starter: ExecutionStarter,
        heartbeat_every: float,
        sleep: Callable[[float], None] = time.sleep,
        *,
        events: EventPublisher = NO_EVENTS,
        runner: ToolRunner | None = None,
    ) -> None:
        self._store = store
        self._runner = runner or InProcessToolRunner()
        self._reporter = reporter
        self._starter = starter
        self._heartbeat_every = heartbeat_every
        self._sleep = sleep
        self._events = events

    def execute(
        self,
        message: ToolCallMessage,
        lease_seconds: int,
        attempt: int = 1,
        time_left: Callable[[], float] | None = None,
    ) -> CallOutcome | None:
        """The call's outcome, or None when it was handed to a child run, which answers it.
        `time_left`: the seconds the invocation has left (None: no limit but the tool's own)."""
        # Events wait until the task is answered: publishing is off the run's path.
        with self._events.deferred():
            return self._execute(message, lease_seconds, attempt, time_left)

    def _execute(
        self,
        message: ToolCallMessage,
        lease_seconds: int,
        attempt: int,
        time_left: Callable[[], float] | None,
    ) -> CallOutcome | None:
        if not self._beat_at_start(message.task_token):
            return None
        read = self._store.load_call(message.run_id, message.message_seq, message.seq)
        result = read.result
        if result is None:
            result = self._claim_and_run(message, read, lease_seconds, attempt, time_left)
        if result is None:
            return None
        assert isinstance(result, ToolResult), "a call's result slot holds a non-result"
        return self._answer(message, result)

    # --- phases -----------------------------------------------------------------------------

    def _beat_at_start(self, token: str) -> bool:
        """Each delivery beats at once, so a crashed delivery's silence lasts one visibility
        timeout at most. A token that stays closed means the call is over for Step Functions
        (timed out, stopped): nothing runs. Tried a few times over ~1.5 s first, since a worker
        can take the message before the task is seen to wait (measured on moto's interpreter)."""
        for delay in START_BEAT_DELAYS:
            self._sleep(delay)
            if self._reporter.heartbeat(token):
                return True
        return False

    def _claim_and_run(
        self,
        message: ToolCallMessage,
        read: CallRead,
        lease_seconds: int,
        attempt: int,
        time_left: Callable[[], float] | None,
    ) -> ToolResult | None:
        started_at = utc_now()
        claim = self._store.claim_call(message.run_id, message.seq, lease_seconds)
        if claim.state is ClaimState.BUSY:
            raise CallInProgressError(
                f"call {message.seq} of run {message.run_id} is being run by another delivery"
            )
        if claim.state is ClaimState.DONE:
            stored = self._store.get_item(message.run_id, message.seq)
            assert isinstance(stored, ToolResult), "a call marked DONE has no result"
            return stored
        try:
            call = self._load(message, claim, read, started_at)
        except BaseException:
            # Nothing ran yet: free the call so the redelivery can run it at once.
            self._store.release_call(message.run_id, message.seq, claim.owner)
            raise
        if call.run.status is RunStatus.CANCELLED:
            # Its execution was stopped: a delivery that still arrives runs nothing, not even a
            # child run. The result says so, so the call does not look pending forever.
            cancelled = Execution.failed(ErrorKind.RUN_CANCELLED, "not run: the run was cancelled.")
            return self._persist(call, cancelled, attempt, ({}, []))
        refusal = _approval_refusal(call)
        if refusal is not None:
            return self._persist(call, refusal, attempt, ({}, []))
        if call.tool is not None and call.tool.child_agent is not None:
            return self._delegate(call, _tool_seconds(time_left))
        if claim.state is ClaimState.TAKEN_OVER and not (call.tool is not None and call.tool.idempotent):
            return self._persist(call, self._in_doubt(call), attempt, ({}, []))
        # Only a tool that takes a context, or a hook, can see the run's state: others skip the read.
        uses_state = call.tool is not None and (call.tool.context_param is not None or bool(call.agent.hooks))
        gate = call.gate
        request = ToolRunRequest(
            run_id=call.run.run_id,
            agent=call.agent.name,
            call=call.call,
            caller=call.run.caller,
            idempotency_key=f"{call.run.run_id}:{message.seq}",
            input_object=call.run.input_object,
            mcp_servers=call.run.mcp_servers,
            state=self._store.load_state(call.run.run_id) if uses_state else None,
            allowed=allowed_tools(call.run, call.agent.name),
            approved=None
            if gate is None
            else ApprovedCall(name=call.call.name, arguments_sha256=gate.arguments_sha256),
            time_limit=_tool_seconds(time_left),
        )
        with self._heartbeats(message.task_token):
            answer = self._runner.run(request, call.tool)
        if len(json.dumps(answer.state_set).encode()) > STATE_LIMIT_BYTES:
            # The runner checks it too; this worker does not take the runner's word for it.
            too_big = Execution.failed(
                ErrorKind.TOOL_FAILED,
                f"Tool '{call.call.name}' left more run state than a run keeps. Nothing it stored was kept.",
                answer.duration_ms,
            )
            return self._persist(call, too_big, attempt, ({}, []))
        return self._persist(
            call,
            answer.execution(),
            attempt,
            (answer.state_set, answer.state_removed),
            answer.handoff,
            answer.app_version,
        )

    @staticmethod
    def _load(message: ToolCallMessage, claim: Claim, read: CallRead, started_at: str) -> _Call:
        run, reply = read.run, read.reply
        index = message.seq - message.message_seq - 1
        if not isinstance(reply, AssistantMessage) or not 0 <= index < len(reply.tool_calls):
            raise ValueError(f"message_seq {message.message_seq} and seq {message.seq} name no call")
        call = reply.tool_calls[index]
        agent = reply_agent(run, reply)
        try:
            tool: Tool | None = agent.registry.get(call.name)  # by wire name, or a schema tool's own
        except UnknownToolError:
            tool = None
        gate = None if read.gate is None else Gate.from_item(read.gate)
        if gate is not None and gate.arguments is not None and gate.status is ApprovalStatus.APPROVED:
            # A person edited the arguments before approving: the call runs with exactly
            # those, if they still hash to what was approved (the check below), never the model's.
            call = call.model_copy(update={"arguments": gate.arguments})
        return _Call(message, claim, run, agent, reply, call, tool, gate, started_at)

    def _in_doubt(self, call: _Call) -> Execution:
        return Execution.failed(
            ErrorKind.IN_DOUBT,
            f"the call to '{call.call.name}' was interrupted and may or may not have taken effect; "
            "it was not run again. Check its effect before calling it again.",
        )

    def _delegate(self, call: _Call, limit: float | None) -> ToolResult | None:
        """Start the child run that answers this call, or an error result if it may not start."""
        assert call.tool is not None and call.tool.child_agent is not None
        root_id = call.run.root_run_id or call.run.run_id
        root_agent = (
            call.agent
            if root_id == call.run.run_id
            else get_agent(self._store.get_run(root_id).current_agent)
        )
        refusal = children.depth_refusal(call.run, root_agent)
        if refusal is not None:
            return self._persist(call, Execution(refusal, "error", 0, ErrorKind.AGENT_DEPTH), 1, ({}, []))
        try:
            child = get_agent(call.tool.child_agent)
        except UnknownAgentError:
            missing = Execution.failed(
                ErrorKind.UNKNOWN_AGENT, f"no agent named '{call.tool.child_agent}' is registered."
            )
            return self._persist(call, missing, 1, ({}, []))
        if child.waits:
            # Refused at import for an app's agents; this covers agents registered in code.
            waits = child_waits(call.agent.name, call.tool.name, child.name)
            return self._persist(call, Execution.failed(ErrorKind.AGENT_WAITS, f"{waits}."), 1, ({}, []))
        # An agent tool passes the same `before_tool` hooks as any other: they may block it.
        context = ToolContext(
            run_id=call.run.run_id,
            agent=call.agent.name,
            call_id=call.call.id,
            caller=call.run.caller,
            idempotency_key=f"{call.run.run_id}:{call.message.seq}",
        )
        try:
            hooked, answered = (
                _hooks_before(call.agent, call.call, context)
                if limit is None
                else run_with_limit(
                    _hooks_before, (call.agent, call.call, context), limit, "agent-tool-hooks"
                )
            )
        except Overran:
            overran = Execution.failed(
                ErrorKind.TOOL_FAILED,
                f"not run: the before_tool hooks of '{call.call.name}' did not finish in {limit:.3g} s.",
            )
            return self._persist(call, overran, 1, ({}, []))
        if isinstance(answered, _HookFailure):
            return self._persist(call, answered.execution, 1, ({}, []))
        if (
            answered is None
            and call.gate is not None
            and arguments_hash(hooked.arguments) != call.gate.arguments_sha256
        ):
            # As for any gated tool: the child run gets only the task a person approved.
            answered = not_approved(call.call.name, "its arguments were changed after they were approved")
        if answered is not None:
            return self._persist(call, answered, 1, ({}, []))
        try:
            task = str(call.tool.parse_arguments(hooked.arguments)["task"])
        except ModelVisibleError as e:  # a hook rewrote the arguments into something invalid
            return self._persist(call, Execution.failed(e.kind, str(e)), 1, ({}, []))
        children.start_child(
            self._store,
            self._starter,
            call.run,
            call.reply,
            call.call,
            call.message.seq,
            call.tool.child_agent,
            task,
            call.message.task_token,
            self._events,
        )
        return None

    def _persist(
        self,
        call: _Call,
        execution: Execution,
        attempt: int,
        changes: tuple[dict[str, object], list[str]],
        handoff: HandoffAction | None = None,
        app_version: str | None = None,
    ) -> ToolResult:
        """Store the outcome before anything else happens; the stored one wins a race."""
        result = self._to_result(call, execution, attempt, handoff).model_copy(
            update={"app_version": app_version}
        )
        for tries in range(1, PERSIST_ATTEMPTS + 1):
            try:
                if self._store.complete_call(call.run.run_id, result, call.claim.owner, changes):
                    # Only here, where the outcome was first stored: a redelivery answering
                    # from it, or a racer whose write lost, publishes nothing.
                    self._events.tool_call_completed(call.run, result)
                    return result
                break
            except Exception:
                if tries == PERSIST_ATTEMPTS:
                    raise
                logger.warning("storing a tool result failed; retrying", extra={"run_id": call.run.run_id})
                self._sleep(PERSIST_BACKOFF_SECONDS * 2 ** (tries - 1))
        stored = self._store.get_item(call.run.run_id, call.message.seq)
        if not isinstance(stored, ToolResult):
            raise CallInProgressError(f"call {call.message.seq} of run {call.run.run_id} was taken over")
        return stored

    def _to_result(
        self, call: _Call, execution: Execution, attempt: int, handoff: HandoffAction | None = None
    ) -> ToolResult:
        content, detail, ref, chars = text_safe(execution.content), None, None, None
        if call.gate is not None and call.gate.arguments is not None:
            # The model must know its call did not run as it asked: one line before the result.
            content = f"{edited_note(call.gate.arguments)}\n{content}"
        handoff, refused = _tool_handoff(call, execution, handoff)
        if refused is not None:
            # The tool has run: its result stands, and says why the run stays where it is.
            content = f"{content}\n(Not transferred: {refused}.)"
        if execution.error_type is ErrorKind.TOOL_FAILED and call.agent.on_tool_error == "generic":
            content, detail = error_text(f"the tool '{call.call.name}' failed."), content
        else:
            content, ref, chars = self._fit(call, content)
        return ToolResult(
            seq=call.message.seq,
            turn=call.reply.turn,
            call_id=call.call.id,
            tool=call.call.name,
            content=content,
            status=execution.status,
            duration_ms=execution.duration_ms,
            error_type=execution.error_type,
            attempts=attempt,
            error_detail=detail,
            full_result_ref=ref,
            full_result_chars=chars,
            handoff=handoff,
            started_at=call.started_at,
        )

    def _fit(self, call: _Call, content: str) -> tuple[str, str | None, int | None]:
        """What the model reads of the result, its whole stored in S3 when long. The upload is
        tried as the ledger write is; if it never succeeds, the model still reads the
        beginning and why the rest is missing: the tool has run, its call must end."""
        run_id, seq = call.run.run_id, call.message.seq
        for tries in range(1, PERSIST_ATTEMPTS + 1):
            try:
                return fit_for_model(self._store, call.agent, run_id, seq, content)
            except Exception as e:
                if tries == PERSIST_ATTEMPTS:
                    logger.exception("storing a long tool result failed", extra={"run_id": run_id})
                    return unstored_preview(call.agent, content, describe_exception(e))
                logger.warning("storing a long tool result failed; retrying", extra={"run_id": run_id})
                self._sleep(PERSIST_BACKOFF_SECONDS * 2 ** (tries - 1))
        raise AssertionError("unreachable")

    def _answer(self, message: ToolCallMessage, result: ToolResult) -> CallOutcome:
        outcome = CallOutcome(seq=result.seq, status=result.status)
        self._reporter.succeed(message.task_token, outcome.model_dump(exclude_none=True))
        return outcome

    @contextmanager
    def _heartbeats(self, token: str) -> Iterator[None]:
        """Tell Step Functions the call is alive while a long tool runs (HeartbeatSeconds)."""
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self._heartbeat_every):
                if not self._reporter.heartbeat(token):
                    return

        thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)


def _tool_seconds(time_left: Callable[[], float] | None) -> float | None:
    """What the call's user code may take of the invocation's time (None: no limit)."""
    return None if time_left is None else max(MIN_TOOL_SECONDS, time_left() - RESERVE_SECONDS)


@dataclass(frozen=True)
class _HookFailure:
    execution: Execution


def _hooks_before(
    agent: Agent, call: ToolCall, context: ToolContext
) -> tuple[ToolCall, Execution | _HookFailure | None]:
    """An agent tool's `before_tool` hooks (user code, run here since the child run starts from
    the worker), their failure said inside the time limit: its `__str__` is theirs too."""
    try:
        return before_hooks(agent, call, context)
    except BaseException as e:  # SystemExit too: a hook's, not ours
        failure = error_text(f"Tool '{call.name}' failed: {describe_exception(e)}")
        return call, _HookFailure(Execution(failure, "error", 0, ErrorKind.TOOL_FAILED))


def _tool_handoff(
    call: _Call, execution: Execution, asked: HandoffAction | None
) -> tuple[HandoffAction | None, str | None]:
    """What a tool asked of the run through `context.actions`, as this worker honours it (the
    runner's answer is tool code's: nothing in it is taken on trust): only from a call that
    succeeded, a transfer only to one of its agent's handoffs; and why not, when not."""
    if asked is None or execution.status != "ok":
        return None, None
    if asked.kind == "escalate":
        return HandoffAction(kind="escalate"), None
    target = asked.agent or ""
    if call.agent.transfer_to(target) is None:
        return None, f"'{target}' is not one of the handoffs of '{call.agent.name}'"
    try:
        to = get_agent(target)
    except UnknownAgentError:
        return None, f"no agent named '{target}' is deployed"
    refusal = transfer_refusal(call.run, call.agent.name, to)
    if refusal is not None:
        return None, refusal
    return HandoffAction(kind="transfer", agent=target), None


def edited_note(arguments: str) -> str:
    """The line a result of a call whose arguments a person edited starts with."""
    return f"Note: a person changed the arguments before approving; the call used {arguments}"


def _approval_refusal(call: _Call) -> Execution | None:
    """Why a call must not run for want of an approval, or None. The state machine dispatches a
    gated call only once approved; this is the worker's own check that what runs is exactly
    what was approved (the arguments' hash), and that a tool that requires approval never runs
    without one."""
    gate, tool = call.gate, call.tool
    if gate is not None:
        if gate.status is not ApprovalStatus.APPROVED:
            return not_approved(call.call.name, f"it is {gate.status.value}")
        if arguments_hash(call.call.arguments) != gate.arguments_sha256:
            return not_approved(call.call.name, "its arguments are not the ones approved")
        return _changed_refusal(call.call.name, tool, gate)
    context = ToolContext(
        run_id=call.run.run_id, agent=call.agent.name, call_id=call.call.id, caller=call.run.caller
    )
    return policy_refusal(tool, call.call, context)


def _changed_refusal(name: str, tool: Tool | None, gate: Gate) -> Execution | None:
    """An approved call whose tool is no longer the one the model saw when the call started to
    wait (a deploy, or locally a re-registered agent, changed or removed it): the person
    approved these arguments for the old tool, so the new one does not run on them. A gate
    stored before the tool's hash was kept (`tool_sha256` None) runs as before."""
    if gate.tool_sha256 is None or (tool is not None and tool_hash(tool) == gate.tool_sha256):
        return None
    return Execution.failed(
        ErrorKind.TOOL_CHANGED,
        f"not run: the tool '{name}' changed while its call waited for approval; ask again.",
    )
