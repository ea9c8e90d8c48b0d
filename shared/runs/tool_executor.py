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
from typing import Any

from toolpipe.shared.agents import Agent, get_agent, run_agent
from toolpipe.shared.agents.app import child_waits
from toolpipe.shared.approvals.hashing import arguments_hash, tool_hash
from toolpipe.shared.approvals.models import ApprovalStatus, Gate
from toolpipe.shared.errors import (
    CallInProgressError,
    ErrorKind,
    ModelVisibleError,
    ToolTimeoutError,
    UnknownAgentError,
    UnknownToolError,
    describe_exception,
)
from toolpipe.shared.history import CallRead, Claim, ClaimState, HistoryStore
from toolpipe.shared.messages import (
    AssistantMessage,
    CallOutcome,
    RunRecord,
    RunStatus,
    ToolCall,
    ToolCallMessage,
    ToolResult,
    text_safe,
)
from toolpipe.shared.runs import children
from toolpipe.shared.runs.events import NO_EVENTS, EventPublisher
from toolpipe.shared.runs.ports import ExecutionStarter, TaskReporter
from toolpipe.shared.runs.results import fit_for_model, unstored_preview
from toolpipe.shared.runs.tool_hooks import after_hooks, before_hooks
from toolpipe.shared.tools import Execution, RunState, Tool, ToolContext
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
# Hooks around the tool get this much past the tool's own limit before the call is given up.
HOOKS_GRACE_SECONDS = 2.0
# What `ToolContext.state` may hold, as JSON: it is one DynamoDB item, and items stop at 400 KB.
STATE_LIMIT_BYTES = 300_000


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
    ) -> None:
        self._store = store
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
            call = self._load(message, claim, read)
        except BaseException:
            # Nothing ran yet: free the call so the redelivery can run it at once.
            self._store.release_call(message.run_id, message.seq, claim.owner)
            raise
        if call.run.status is RunStatus.CANCELLED:
            # Its execution was stopped: a delivery that still arrives runs nothing, not even a
            # child run. The result says so, so the call does not look pending forever.
            cancelled = Execution(
                "Error: not run: the run was cancelled.", "error", 0, ErrorKind.RUN_CANCELLED
            )
            return self._persist(call, cancelled, attempt, ({}, []))
        refusal = _approval_refusal(call)
        if refusal is not None:
            return self._persist(call, refusal, attempt, ({}, []))
        if call.tool is not None and call.tool.child_agent is not None:
            return self._delegate(call)
        if claim.state is ClaimState.TAKEN_OVER and not (call.tool is not None and call.tool.idempotent):
            return self._persist(call, self._in_doubt(call), attempt, ({}, []))
        # Only a tool that takes a context, or a hook, can see the run's state: others skip the read.
        uses_state = call.tool is not None and (call.tool.context_param is not None or bool(call.agent.hooks))
        state = RunState(self._store.load_state(call.run.run_id) if uses_state else {})
        context = ToolContext(
            run_id=call.run.run_id,
            agent=call.run.agent,
            call_id=call.call.id,
            caller=call.run.caller,
            state=state,
            idempotency_key=f"{call.run.run_id}:{message.seq}",
            input_object=call.run.input_object,
        )
        limit = None if time_left is None else max(MIN_TOOL_SECONDS, time_left() - RESERVE_SECONDS)
        with self._heartbeats(message.task_token):
            execution, changes = self._run_tool(call, context, state, limit)
        return self._persist(call, execution, attempt, changes)

    def _run_tool(
        self, call: _Call, context: ToolContext, state: RunState, limit: float | None
    ) -> tuple[Execution, tuple[dict[str, Any], list[str]]]:
        """The call's outcome and the state changes to keep. Whatever the tool, its hooks, its
        result converter or its state do that the worker could not store becomes the tool's
        error (an exit, a hang past `limit` seconds): a claimed call must always end with a
        result, never an invocation that dies or hangs."""
        arguments = (call.agent, call.call, context, call.run.tools, call.gate)
        try:
            if limit is None:
                execution = _execute_with_hooks(*arguments, None)
            else:
                deadline = time.monotonic() + limit
                execution = run_with_limit(
                    _execute_with_hooks, (*arguments, deadline), limit + HOOKS_GRACE_SECONDS, "tool-call"
                )
            if execution.error_type is ErrorKind.TOOL_TIMEOUT:
                # The tool may still be running and writing its state: none of it is kept.
                return execution, ({}, [])
            changes = state.changes()
            size = len(json.dumps(dict(state)).encode())
        except Overran:
            # The tool's own limit answers first; this is a hook (or a converter) that hung.
            idempotent = call.tool is not None and call.tool.idempotent
            overran = ToolTimeoutError(call.call.name, limit or 0, idempotent, worker_limit=True)
            return Execution(f"Error: {overran}", "error", 0, overran.kind), ({}, [])
        except BaseException as e:  # SystemExit and KeyboardInterrupt too: tool code's, not ours
            failure = f"Error: Tool '{call.call.name}' failed: {describe_exception(e)}"
            return Execution(failure, "error", 0, ErrorKind.TOOL_FAILED), ({}, [])
        if size > STATE_LIMIT_BYTES:
            # The state shares one DynamoDB item (400 KB): refused as the tool's error, not a crash.
            execution = Execution(
                f"Error: Tool '{call.call.name}' left {size} bytes of run state; a run keeps at most "
                f"{STATE_LIMIT_BYTES}. Nothing it stored was kept.",
                "error",
                execution.duration_ms,
                ErrorKind.TOOL_FAILED,
            )
            return execution, ({}, [])
        return execution, changes

    @staticmethod
    def _load(message: ToolCallMessage, claim: Claim, read: CallRead) -> _Call:
        run, reply = read.run, read.reply
        index = message.seq - message.message_seq - 1
        if not isinstance(reply, AssistantMessage) or not 0 <= index < len(reply.tool_calls):
            raise ValueError(f"message_seq {message.message_seq} and seq {message.seq} name no call")
        call = reply.tool_calls[index]
        agent = run_agent(run)
        try:
            tool: Tool | None = agent.registry.get(call.name)  # by wire name, or a schema tool's own
        except UnknownToolError:
            tool = None
        gate = None if read.gate is None else Gate.from_item(read.gate)
        if gate is not None and gate.arguments is not None and gate.status is ApprovalStatus.APPROVED:
            # A person edited the arguments before approving: the call runs with exactly
            # those, if they still hash to what was approved (the check below), never the model's.
            call = call.model_copy(update={"arguments": gate.arguments})
        return _Call(message, claim, run, agent, reply, call, tool, gate)

    def _in_doubt(self, call: _Call) -> Execution:
        return Execution(
            f"Error: the call to '{call.call.name}' was interrupted and may or may not have taken effect; "
            "it was not run again. Check its effect before calling it again.",
            "error",
            0,
            ErrorKind.IN_DOUBT,
        )

    def _delegate(self, call: _Call) -> ToolResult | None:
        """Start the child run that answers this call, or an error result if it may not start."""
        assert call.tool is not None and call.tool.child_agent is not None
        root_id = call.run.root_run_id or call.run.run_id
        root_agent = (
            call.agent if root_id == call.run.run_id else get_agent(self._store.get_run(root_id).agent)
        )
        refusal = children.depth_refusal(call.run, root_agent)
        if refusal is not None:
            return self._persist(call, Execution(refusal, "error", 0, ErrorKind.AGENT_DEPTH), 1, ({}, []))
        try:
            child = get_agent(call.tool.child_agent)
        except UnknownAgentError:
            missing = Execution(
                f"Error: no agent named '{call.tool.child_agent}' is registered.",
                "error",
                0,
                ErrorKind.UNKNOWN_AGENT,
            )
            return self._persist(call, missing, 1, ({}, []))
        if child.waits:
            # Refused at import for an app's agents; this covers agents registered in code.
            waits = child_waits(call.agent.name, call.tool.name, child.name)
            return self._persist(
                call, Execution(f"Error: {waits}.", "error", 0, ErrorKind.AGENT_WAITS), 1, ({}, [])
            )
        # An agent tool passes the same `before_tool` hooks as any other: they may block it.
        context = ToolContext(
            run_id=call.run.run_id,
            agent=call.run.agent,
            call_id=call.call.id,
            caller=call.run.caller,
            idempotency_key=f"{call.run.run_id}:{call.message.seq}",
        )
        try:
            hooked, answered = before_hooks(call.agent, call.call, context)
        except BaseException as e:  # SystemExit too: a hook's, not ours
            failure = Execution(
                f"Error: Tool '{call.call.name}' failed: {describe_exception(e)}",
                "error",
                0,
                ErrorKind.TOOL_FAILED,
            )
            return self._persist(call, failure, 1, ({}, []))
        if (
            answered is None
            and call.gate is not None
            and arguments_hash(hooked.arguments) != call.gate.arguments_sha256
        ):
            # As for any gated tool: the child run gets only the task a person approved.
            answered = _not_approved(call.call.name, "its arguments were changed after they were approved")
        if answered is not None:
            return self._persist(call, answered, 1, ({}, []))
        try:
            task = str(call.tool.parse_arguments(hooked.arguments)["task"])
        except ModelVisibleError as e:  # a hook rewrote the arguments into something invalid
            return self._persist(call, Execution(f"Error: {e}", "error", 0, e.kind), 1, ({}, []))
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
        self, call: _Call, execution: Execution, attempt: int, changes: tuple[dict[str, object], list[str]]
    ) -> ToolResult:
        """Store the outcome before anything else happens; the stored one wins a race."""
        result = self._to_result(call, execution, attempt)
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

    def _to_result(self, call: _Call, execution: Execution, attempt: int) -> ToolResult:
        content, detail, ref, chars = text_safe(execution.content), None, None, None
        if call.gate is not None and call.gate.arguments is not None:
            # The model must know its call did not run as it asked: one line before the result.
            content = f"{edited_note(call.gate.arguments)}\n{content}"
        if execution.error_type is ErrorKind.TOOL_FAILED and call.agent.on_tool_error == "generic":
            content, detail = f"Error: the tool '{call.call.name}' failed.", content
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


def edited_note(arguments: str) -> str:
    """The line a result of a call whose arguments a person edited starts with."""
    return f"Note: a person changed the arguments before approving; the call used {arguments}"


def _not_approved(tool: str, why: str) -> Execution:
    return Execution(
        f"Error: not run: the call to '{tool}' needs a person's approval, and {why}.",
        "error",
        0,
        ErrorKind.NOT_APPROVED,
    )


def _approval_refusal(call: _Call) -> Execution | None:
    """Why a call must not run for want of an approval, or None. The state machine dispatches a
    gated call only once approved; this is the worker's own check that what runs is exactly
    what was approved (the arguments' hash), and that a tool that requires approval never runs
    without one."""
    gate, tool = call.gate, call.tool
    if gate is not None:
        if gate.status is not ApprovalStatus.APPROVED:
            return _not_approved(call.call.name, f"it is {gate.status.value}")
        if arguments_hash(call.call.arguments) != gate.arguments_sha256:
            return _not_approved(call.call.name, "its arguments are not the ones approved")
        return _changed_refusal(call.call.name, tool, gate)
    context = ToolContext(
        run_id=call.run.run_id, agent=call.run.agent, call_id=call.call.id, caller=call.run.caller
    )
    return _policy_refusal(tool, call.call, context)


def _changed_refusal(name: str, tool: Tool | None, gate: Gate) -> Execution | None:
    """An approved call whose tool is no longer the one the model saw when the call started to
    wait (a deploy, or locally a re-registered agent, changed or removed it): the person
    approved these arguments for the old tool, so the new one does not run on them. A gate
    stored before the tool's hash was kept (`tool_sha256` None) runs as before."""
    if gate.tool_sha256 is None or (tool is not None and tool_hash(tool) == gate.tool_sha256):
        return None
    return Execution(
        f"Error: not run: the tool '{name}' changed while its call waited for approval; ask again.",
        "error",
        0,
        ErrorKind.TOOL_CHANGED,
    )


def _policy_refusal(tool: Tool | None, call: ToolCall, context: ToolContext) -> Execution | None:
    """A call with no approval recorded: refused if its tool's policy wants one for it."""
    if tool is not None and tool.deferred is not None:
        # Answered from outside (a person, the caller's program): the state machine never
        # dispatches such a call, and a worker that gets one (a hook renamed a call) runs nothing.
        return Execution(
            f"Error: not run: '{call.name}' is answered from outside (a person or the caller's "
            "program), never run by a worker.",
            "error",
            0,
            ErrorKind.NOT_APPROVED,
        )
    if tool is None or tool.requires_approval is False:
        return None
    try:
        arguments = tool.parse_arguments(call.arguments)
    except ModelVisibleError:
        return None  # the registry answers the invalid arguments
    if tool.needs_approval(arguments, context):
        return _not_approved(call.name, "none was recorded")
    return None


def _hooked_refusal(
    agent: Agent, call: ToolCall, context: ToolContext, gate: Gate | None, approved_name: str
) -> Execution | None:
    """The approval check again, on the call as the `before_tool` hooks leave it: a hook may
    rename a call or rewrite its arguments, and what runs must be what was approved, or need
    no approval at all."""
    if gate is not None:
        if call.name != approved_name or arguments_hash(call.arguments) != gate.arguments_sha256:
            return _not_approved(call.name, "it was changed after it was approved")
        return None
    try:
        tool: Tool | None = agent.registry.get(call.name)
    except UnknownToolError:
        tool = None
    return _policy_refusal(tool, call, context)


def _execute_with_hooks(
    agent: Agent,
    call: ToolCall,
    context: ToolContext,
    allowed: list[str] | None,
    gate: Gate | None,
    deadline: float | None,
) -> Execution:
    approved_name = call.name
    call, answered = before_hooks(agent, call, context)
    if answered is None:
        answered = _hooked_refusal(agent, call, context, gate, approved_name)
    if answered is None:
        # The tool gets what the hooks before it left of the call's time.
        time_limit = None if deadline is None else max(0.0, deadline - time.monotonic())
        answered = agent.registry.execute(call, context, allowed=allowed, time_limit=time_limit)
    return after_hooks(agent, call, answered, context)
