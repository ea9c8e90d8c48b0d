"""Tool code's side of a call: what the tool runner receives, runs and answers.

Everything a user wrote that runs for a call (the `before_tool` hooks, the tool, its result
converter, the `after_tool` hooks) runs here, in the tool runner function, whose role holds no
key to the pipeline: no table, no task token, no event bus, no model key. The tool worker
(shared/runs/tool_executor.py) claims the call, sends this request, stores the answer and
answers the waiting task; a tool never sees the token or the ledger.
"""

import json
import re
import time
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from toolpipe.shared.agents import Agent, agent_for
from toolpipe.shared.deferred.hashing import arguments_hash
from toolpipe.shared.errors import ErrorKind, ModelVisibleError, describe_exception, error_text
from toolpipe.shared.messages import NAME_PATTERN, HandoffAction, InputObject, ToolCall
from toolpipe.shared.runs.tool_hooks import after_hooks, before_hooks
from toolpipe.shared.tools import Execution, RunState, Tool, ToolContext
from toolpipe.shared.tools.errors import ToolTimeoutError, UnknownToolError
from toolpipe.shared.tools.time_limit import Overran, run_with_limit

# What `ToolContext.state` may hold, as JSON: it is one DynamoDB item, and items stop at 400 KB.
STATE_LIMIT_BYTES = 300_000
# Hooks around the tool get this much past the tool's own limit before the call is given up.
HOOKS_GRACE_SECONDS = 2.0


class ApprovedCall(BaseModel):
    """What a person approved, for the check after the `before_tool` hooks: what runs must be
    exactly that (the hooks may rename a call or rewrite its arguments)."""

    name: str
    arguments_sha256: str


class ToolRunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    agent: str
    call: ToolCall
    caller: str | None = None
    idempotency_key: str
    input_object: InputObject | None = None
    # A presigned GET of the run's input object, minted by the worker for this call.
    input_link: str | None = None
    # The run's own MCP servers (`toolpipe run --mcp`): their tools are the run's too.
    mcp_servers: list[str] | None = None
    # The run's state as loaded, when the tool or a hook can see it (None: not read).
    state: dict[str, Any] | None = None
    allowed: list[str] | None = None  # the run's tool set, when it names one
    approved: ApprovedCall | None = None
    # Seconds the tool and its hooks may take (the worker's time left, less its reserve).
    time_limit: float | None = None
    # Where to put a result too long to answer in line (S3 key, the runner may only put there).
    overflow_key: str | None = None


class ToolRunResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = ""
    status: Literal["ok", "error"]
    duration_ms: int = 0
    error_type: ErrorKind | None = None
    state_set: dict[str, Any] = {}
    state_removed: list[str] = []
    # The content was too long to answer in line: it is at the request's `overflow_key`.
    overflowed: bool = False
    # What the tool asked of the run (`context.actions`): a transfer or an escalate.
    handoff: HandoffAction | None = None
    # The version of the app the call's process ran (`shared/app_ref.py`'s `app_version`).
    app_version: str | None = None

    @classmethod
    def of(
        cls,
        execution: Execution,
        changes: tuple[dict[str, Any], list[str]] = ({}, []),
        handoff: HandoffAction | None = None,
    ) -> "ToolRunResponse":
        return cls(
            content=execution.content,
            status=execution.status,
            duration_ms=execution.duration_ms,
            error_type=execution.error_type,
            state_set=changes[0],
            state_removed=changes[1],
            handoff=handoff,
        )

    def execution(self) -> Execution:
        return Execution(self.content, self.status, self.duration_ms, self.error_type)


class ToolRunner(Protocol):
    """Runs a call's tool code somewhere its credentials cannot reach the pipeline."""

    def run(self, request: ToolRunRequest, tool: Tool | None) -> ToolRunResponse:
        """The call's outcome; `tool` (None: unknown) names the runner to run it in
        (`Tool.runner`) and words a failure of the runner itself."""
        ...


class InProcessToolRunner:
    """Runs tool code in this process, with this process's credentials: for tests of the worker
    and for code that calls the worker's executor directly. The deployed worker and the local
    runtime use the tool runner function (`LambdaToolRunner`)."""

    def run(self, request: ToolRunRequest, tool: Tool | None) -> ToolRunResponse:
        return run_tool_call(request)


def run_tool_call(request: ToolRunRequest) -> ToolRunResponse:
    """Run the call as its agent defines it. Whatever the tool, its hooks, its converter or its
    state do becomes the call's error (an exit, a hang past the time limit): the answer always
    comes back, never an invocation that dies or hangs."""
    agent = agent_for(request.agent, request.mcp_servers, reads_input=request.input_object is not None)
    state = RunState(request.state or {})
    context = ToolContext(
        run_id=request.run_id,
        agent=request.agent,
        call_id=request.call.id,
        caller=request.caller,
        state=state,
        idempotency_key=request.idempotency_key,
        input_object=request.input_object,
        input_link=request.input_link,
    )
    limit = request.time_limit
    arguments = (agent, request.call, context, request.allowed, request.approved)
    try:
        if limit is None:
            execution = _run_with_hooks(*arguments, None)
        else:
            deadline = time.monotonic() + limit
            execution = run_with_limit(
                _run_with_hooks, (*arguments, deadline), limit + HOOKS_GRACE_SECONDS, "tool-call"
            )
    except Overran:
        # The tool's own limit answers first; this is a hook, a converter or an error's message
        # that hung. It may still be running and writing the state: none of it is kept.
        return overran(request, agent)
    if execution.error_type is ErrorKind.TOOL_TIMEOUT:
        return ToolRunResponse.of(execution)  # whatever a hook made of it, nothing of its state
    try:
        changes = state.changes()
        size = len(json.dumps(dict(state)).encode())
    except (TypeError, ValueError, RecursionError) as e:  # a value JSON cannot hold
        failure = error_text(
            f"Tool '{request.call.name}' left run state that cannot be stored: {describe_exception(e)}"
        )
        return ToolRunResponse.of(Execution(failure, "error", 0, ErrorKind.TOOL_FAILED))
    if size > STATE_LIMIT_BYTES:
        # The state shares one DynamoDB item (400 KB): refused as the tool's error, not a crash.
        refused = Execution.failed(
            ErrorKind.TOOL_FAILED,
            f"Tool '{request.call.name}' left {size} bytes of run state; a run keeps at most "
            f"{STATE_LIMIT_BYTES}. Nothing it stored was kept.",
            execution.duration_ms,
        )
        return ToolRunResponse.of(refused)
    if execution.status != "ok":
        return ToolRunResponse.of(execution, changes)  # a failed call's request is not honoured
    try:
        handoff = requested_handoff(context)
    except ValueError as e:
        # The tool has run: its result and state stand, and say why the run stays where it is.
        noted = Execution(
            f"{execution.content}\n(Not transferred: the tool {e}.)", "ok", execution.duration_ms
        )
        return ToolRunResponse.of(noted, changes)
    return ToolRunResponse.of(execution, changes, handoff)


def overran(request: ToolRunRequest, agent: Agent | None = None) -> ToolRunResponse:
    """The answer for a call whose code ran past the time it had: none of its state is kept."""
    idempotent = False
    if agent is None:
        try:
            agent = agent_for(
                request.agent, request.mcp_servers, reads_input=request.input_object is not None
            )
        except Exception:  # an agent we cannot read: not known to be idempotent
            agent = None
    if agent is not None:
        idempotent = _idempotent(agent, request.call.name)
    late = ToolTimeoutError(request.call.name, request.time_limit or 0, idempotent, worker_limit=True)
    return ToolRunResponse.of(Execution.failed(late.kind, str(late)))


def requested_handoff(context: ToolContext) -> HandoffAction | None:
    """What the tool asked through `context.actions`, checked: a transfer wins over an escalate
    asked in the same call. Raises ValueError for a target that cannot be an agent's name."""
    try:  # what a tool left there may be anything: read defensively
        target = getattr(context.actions, "transfer_to_agent", None)
        escalate = getattr(context.actions, "escalate", False) is True
    except Exception as e:
        raise ValueError(f"left context.actions unreadable: {describe_exception(e)}") from e
    if target is not None:
        if not isinstance(target, str) or not re.fullmatch(NAME_PATTERN, target):
            raise ValueError("set context.actions.transfer_to_agent to something that is not an agent's name")
        return HandoffAction(kind="transfer", agent=target)
    if escalate:
        return HandoffAction(kind="escalate")
    return None


def _run_with_hooks(
    agent: Agent,
    call: ToolCall,
    context: ToolContext,
    allowed: list[str] | None,
    approved: ApprovedCall | None,
    deadline: float | None,
) -> Execution:
    """The `before_tool` hooks, the approval check again on what they leave, the tool, the
    `after_tool` hooks: the call's execution, or its failure, said here: inside the time limit,
    since saying it runs the error's own `__str__`, which a hostile one may make hang."""
    try:
        call, answered = before_hooks(agent, call, context)
        if answered is None:
            answered = _hooked_refusal(agent, call, context, approved)
        if answered is None:
            # The tool gets what the hooks before it left of the call's time.
            time_limit = None if deadline is None else max(0.0, deadline - time.monotonic())
            answered = agent.registry.execute(call, context, allowed=allowed, time_limit=time_limit)
        return _checked(call.name, after_hooks(agent, call, answered, context))
    except BaseException as e:  # SystemExit and KeyboardInterrupt too: tool code's
        failure = error_text(f"Tool '{call.name}' failed: {describe_exception(e)}")
        return Execution(failure, "error", 0, ErrorKind.TOOL_FAILED)


def _checked(name: str, execution: object) -> Execution:
    """What a converter or an `after_tool` hook made is text with a known status: else the
    call's error, said here, never a worker that cannot store it."""
    if (
        not isinstance(execution, Execution)
        or not isinstance(execution.content, str)
        or execution.status not in ("ok", "error")
        or not (execution.error_type is None or execution.error_type in set(ErrorKind))
    ):
        shown = type(getattr(execution, "content", execution)).__name__
        return Execution.failed(
            ErrorKind.TOOL_FAILED,
            f"Tool '{name}' failed: its result is not text with a known status ({shown}).",
        )
    return execution


def _idempotent(agent: Agent, name: str) -> bool:
    try:
        return agent.registry.get(name).idempotent
    except UnknownToolError:
        return False


def not_approved(tool: str, why: str) -> Execution:
    return Execution.failed(
        ErrorKind.NOT_APPROVED, f"not run: the call to '{tool}' needs a person's approval, and {why}."
    )


def policy_refusal(tool: Tool | None, call: ToolCall, context: ToolContext) -> Execution | None:
    """A call with no approval recorded: refused if its tool's policy wants one for it."""
    if tool is not None and tool.deferred is not None:
        # Answered from outside (a person, the caller's program): the state machine never
        # dispatches such a call, and a worker that gets one (a hook renamed a call) runs nothing.
        return Execution.failed(
            ErrorKind.NOT_APPROVED,
            f"not run: '{call.name}' is answered from outside (a person or the caller's "
            "program), never run by a worker.",
        )
    if tool is None or tool.requires_approval is False:
        return None
    try:
        arguments = tool.parse_arguments(call.arguments)
    except ModelVisibleError:
        return None  # the registry answers the invalid arguments
    if tool.needs_approval(arguments, context):
        return not_approved(call.name, "none was recorded")
    return None


def _hooked_refusal(
    agent: Agent, call: ToolCall, context: ToolContext, approved: ApprovedCall | None
) -> Execution | None:
    """The approval check again, on the call as the `before_tool` hooks leave it: a hook may
    rename a call or rewrite its arguments, and what runs must be what was approved, or need
    no approval at all."""
    if approved is not None:
        if call.name != approved.name or arguments_hash(call.arguments) != approved.arguments_sha256:
            return not_approved(call.name, "it was changed after it was approved")
        return None
    try:
        tool: Tool | None = agent.registry.get(call.name)
    except UnknownToolError:
        tool = None
    return policy_refusal(tool, call, context)
