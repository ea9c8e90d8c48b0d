"""What a run does, independent of Lambda: start it, take one model step, run one tool call."""

import contextlib
import hashlib
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import ValidationError

from shared.agents import AfterModel, AfterTool, Agent, BeforeModel, BeforeTool, get_agent
from shared.errors import (
    CallInProgressError,
    ModelVisibleError,
    ToolNotAllowedError,
    TooManyCallsError,
    UnknownAgentError,
    UnknownToolsRequestedError,
    describe_validation_error,
)
from shared.history import HistoryStore
from shared.messages import (
    AssistantMessage,
    CallOutcome,
    CallRef,
    Decision,
    DecisionStatus,
    FailRequest,
    HistoryItem,
    ParentCall,
    RunRecord,
    RunStatus,
    StartRunRequest,
    StepRequest,
    ToolCall,
    ToolCallMessage,
    ToolResult,
    UserMessage,
)
from shared.model import ModelClient, to_openai_messages
from shared.runs.ports import ExecutionStarter, TaskReporter
from shared.settings import CallTimeouts
from shared.tools import Execution, RunState, ToolContext


def new_run_id() -> str:
    return uuid.uuid4().hex


class RunStarter:
    def __init__(self, store: HistoryStore, starter: ExecutionStarter) -> None:
        self._store = store
        self._starter = starter

    def start(self, request: StartRunRequest) -> RunRecord:
        agent = get_agent(request.agent)  # an unknown agent is the caller's error, before anything is written
        record = RunRecord(
            run_id=new_run_id(),
            agent=request.agent,
            status=RunStatus.RUNNING,
            timezone=request.timezone,
            caller=request.caller,
            tools=run_tools(agent, request),
        )
        created = self._store.create_run(record, UserMessage(seq=1, turn=0, content=request.prompt))
        # Started even when the run already existed: a retried request whose first attempt
        # wrote the run but died before starting it must not leave it stranded.
        self._starter.start(record.run_id)
        return record if created else self._store.get_run(record.run_id)


def run_tools(agent: Agent, request: StartRunRequest) -> list[str] | None:
    """The tools a run may use: the agent's, narrowed by its tool provider and by the caller's
    allow-list. None means all of the agent's tools."""
    chosen: set[str] | None = None
    if agent.tool_provider is not None:
        chosen = set(agent.tool_provider(request.prompt, request.caller))
    if request.tools is not None:
        unknown = sorted(set(request.tools) - set(agent.registry.names))
        if unknown:
            raise UnknownToolsRequestedError(agent.name, unknown)
        chosen = set(request.tools) if chosen is None else chosen & set(request.tools)
    return None if chosen is None else [name for name in agent.registry.names if name in chosen]


# Results that mean the model's call itself was wrong: each turn with one is a repair turn.
_INVALID_CALL = {"UnknownToolError", "InvalidArgumentsError", "ToolNotAllowedError"}


class ModelStep:
    """One invocation of the orchestrator: at most one model call."""

    def __init__(
        self,
        store: HistoryStore,
        model: ModelClient,
        default_model: str,
        timeouts: CallTimeouts,
        reporter: TaskReporter,
    ) -> None:
        self._store = store
        self._model = model
        self._default_model = default_model
        self._timeouts = timeouts
        self._reporter = reporter

    def step(self, request: StepRequest, deadline: float) -> Decision:
        run = self._store.get_run(request.run_id)
        agent = get_agent(run.agent)
        history = self._store.load_history(run.run_id)
        last_reply = next((i for i in reversed(history) if isinstance(i, AssistantMessage)), None)
        if run.status is not RunStatus.RUNNING:
            return Decision(status=_ended_status(run.status), turn=run.turn)
        if run.parent is not None:
            # The parent's call waits with a heartbeat timeout: each step of the child is a beat.
            token = self._store.get_parent_token(run.run_id)
            if token is not None:
                self._reporter.heartbeat(token)
        if last_reply is not None:
            answered = {i.call_id for i in history if isinstance(i, ToolResult)}
            pending = [c for c in last_reply.tool_calls if c.id not in answered]
            came_back = {o.call_id for o in request.results}
            if history[-1] is last_reply and not (pending and came_back & {c.id for c in pending}):
                # This step already stored its reply and died before returning: decide again
                # from the stored reply instead of asking the model a second time.
                return self._decide(run, agent, last_reply, history)
            history.extend(self._record_missing_results(run, last_reply, answered, request))
            failure = _tool_failure(agent, last_reply, history)
            if failure is not None:
                self._finish(run, RunStatus.FAILED, error=failure)
                return Decision(status=DecisionStatus.FAILED, turn=run.turn)
            direct = _direct_answer(agent, last_reply, history)
            if direct is not None:
                self._finish(run, RunStatus.SUCCEEDED, output=direct)
                return Decision(status=DecisionStatus.FINAL, turn=run.turn)

        limit = _budget_reached(run, agent, history)
        if limit is not None:
            self._finish(run, RunStatus.LIMIT, error=limit)
            return Decision(status=DecisionStatus.LIMIT, turn=run.turn)

        turn = run.turn + 1
        before = BeforeModel(
            run_id=run.run_id,
            agent=agent.name,
            messages=to_openai_messages(agent.system_prompt(run.timezone), history),
            tools=agent.registry.specs(only=run.tools),
        )
        for hooks in agent.hooks:
            hooks.before_model(before)
        reply = before.reply or self._model.complete(
            model=agent.model or self._default_model,
            messages=before.messages,
            tools=before.tools,
            deadline=deadline,
        )
        after = AfterModel(run_id=run.run_id, agent=agent.name, reply=reply)
        for hooks in agent.hooks:
            hooks.after_model(after)
        reply = after.reply
        message_item = AssistantMessage(
            seq=max(i.seq for i in history) + 1, turn=turn, content=reply.content, tool_calls=reply.tool_calls
        )
        if self._store.append(run.run_id, message_item):
            cost = agent.price.micro_usd(reply.prompt_tokens, reply.completion_tokens) if agent.price else 0
            self._store.record_model_call(
                run.run_id, turn, reply.prompt_tokens, reply.completion_tokens, cost
            )
        else:
            stored = self._store.get_item(run.run_id, message_item.seq)
            assert isinstance(stored, AssistantMessage), "history slot after the last item holds a non-reply"
            message_item = stored
        history.append(message_item)
        return self._decide(run, agent, message_item, history)

    def _record_missing_results(
        self, run: RunRecord, reply: AssistantMessage, answered: set[str], request: StepRequest
    ) -> list[ToolResult]:
        """Error results for calls whose worker never wrote one: crashed, timed out, cut off."""
        outcomes = {o.call_id: o for o in request.results}
        written = []
        for index, call in enumerate(reply.tool_calls):
            if call.id in answered:
                continue
            outcome = outcomes.get(call.id)
            reason = outcome.error if outcome and outcome.error else "no result was recorded"
            item = ToolResult(
                seq=reply.seq + 1 + index,
                turn=reply.turn,
                call_id=call.id,
                tool=call.name,
                content=f"Error: the tool call did not complete ({reason}).",
                status="error",
                error_type=outcome.error if outcome and outcome.error else "NoResult",
            )
            self._store.append(run.run_id, item)
            written.append(item)
        return written

    def _decide(
        self, run: RunRecord, agent: Agent, reply: AssistantMessage, history: list[HistoryItem]
    ) -> Decision:
        if not reply.tool_calls:
            try:
                output = _final_output(agent, reply.content or "")
            except ValidationError as e:
                # Ask again: the next model step sees this message; repair turns are bounded.
                self._store.append(
                    run.run_id,
                    UserMessage(
                        seq=reply.seq + 1,
                        turn=reply.turn,
                        repair=True,
                        content="Your final answer does not match the required JSON Schema: "
                        f"{describe_validation_error(e, '(answer)')}. Reply again with only the JSON object.",
                    ),
                )
                return Decision(status=DecisionStatus.TOOL_CALLS, turn=reply.turn)
            self._finish(run, RunStatus.SUCCEEDED, output=output)
            return Decision(status=DecisionStatus.FINAL, turn=reply.turn)
        limit = _calls_limit(agent, history)
        if limit is not None:
            self._finish(run, RunStatus.LIMIT, error=limit)
            return Decision(status=DecisionStatus.LIMIT, turn=reply.turn)
        calls: list[CallRef] = []
        for index, call in enumerate(reply.tool_calls):
            seq = reply.seq + 1 + index
            try:
                # Unknown tools, tools outside the run's set, malformed arguments and calls over
                # the per-turn limit are answered here, without a dispatch.
                if index >= agent.max_calls_per_turn:
                    raise TooManyCallsError(agent.max_calls_per_turn)
                tool = agent.registry.get(call.name)
                if run.tools is not None and tool.name not in run.tools:
                    raise ToolNotAllowedError(call.name)
                tool.parse_arguments(call.arguments)
            except ModelVisibleError as e:
                self._store.append(
                    run.run_id,
                    ToolResult(
                        seq=seq,
                        turn=reply.turn,
                        call_id=call.id,
                        tool=call.name,
                        content=f"Error: {e}",
                        status="error",
                        error_type=type(e).__name__,
                    ),
                )
                continue
            calls.append(
                CallRef(
                    call_id=call.id,
                    seq=seq,
                    message_seq=reply.seq,
                    tool=call.name,
                    timeout_seconds=self._timeouts.timeout_seconds,
                    heartbeat_seconds=self._timeouts.heartbeat_seconds,
                )
            )
        return Decision(status=DecisionStatus.TOOL_CALLS, turn=reply.turn, calls=calls)

    def fail(self, request: FailRequest) -> None:
        error = str(request.error.get("Error", "Error"))
        cause = str(request.error.get("Cause", ""))
        with contextlib.suppress(ValueError, AttributeError):
            # A Lambda function error's cause is the function's error JSON.
            cause = str(json.loads(cause).get("errorMessage", cause))
        run = self._store.get_run(request.run_id)
        self._finish(run, RunStatus.FAILED, error=f"{error}: {cause}" if cause else error)

    def _finish(
        self, run: RunRecord, status: RunStatus, output: str | None = None, error: str | None = None
    ) -> None:
        """Every ending of a run: record it, and answer the parent's call if this is a child run."""
        self._store.finish_run(run.run_id, status, output=output, error=error)
        parent = run.parent
        if parent is None:
            return
        ok = status is RunStatus.SUCCEEDED
        failure = f"Error: the '{run.agent}' agent stopped ({status.value}): {error}"
        result = ToolResult(
            seq=parent.seq,
            turn=parent.turn,
            call_id=parent.call_id,
            tool=parent.tool,
            content=(output or "") if ok else failure,
            status="ok" if ok else "error",
            error_type=None if ok else "ChildRunEnded",
        )
        # Conditional: a retried ending finds the parent's slot taken and changes nothing.
        self._store.append(parent.run_id, result)
        token = self._store.get_parent_token(run.run_id)
        if token is not None:
            outcome = CallOutcome(call_id=parent.call_id, status=result.status)
            self._reporter.succeed(token, outcome.model_dump(exclude_none=True))


def _tool_failure(agent: Agent, reply: AssistantMessage, history: list[HistoryItem]) -> str | None:
    """With `on_tool_error="fail"`, the first tool of the last turn that raised ends the run."""
    if agent.on_tool_error != "fail":
        return None
    for item in history:
        if (
            isinstance(item, ToolResult)
            and item.turn == reply.turn
            and item.error_type == "ToolExecutionError"
        ):
            return (item.error_detail or item.content).removeprefix("Error: ")
    return None


def _direct_answer(agent: Agent, reply: AssistantMessage, history: list[HistoryItem]) -> str | None:
    """Results of `return_direct` tools in the last turn are the run's answer."""
    direct = [
        item.content
        for item in history
        if isinstance(item, ToolResult)
        and item.turn == reply.turn
        and item.status == "ok"
        and item.tool in agent.registry
        and agent.registry.get(item.tool).return_direct
    ]
    return "\n\n".join(direct) if direct else None


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def _final_output(agent: Agent, content: str) -> str:
    """The run's output: the answer as is, or with `output_type`, validated JSON."""
    if agent.output_type is None:
        return content
    match = _FENCE.match(content)  # models often wrap JSON in a code fence
    parsed = agent.output_type.model_validate_json(match.group(1) if match else content)
    return parsed.model_dump_json()


def _budget_reached(run: RunRecord, agent: Agent, history: list[HistoryItem]) -> str | None:
    """Checked before each model call: iterations, repair turns, tokens, cost."""
    if run.turn >= agent.max_iterations:
        return f"stopped after {agent.max_iterations} model turns (the agent's max_iterations)"
    repair_turns = {i.turn for i in history if isinstance(i, ToolResult) and i.error_type in _INVALID_CALL}
    repair_turns |= {i.turn for i in history if isinstance(i, UserMessage) and i.repair}
    if len(repair_turns) > agent.max_repair_turns:
        return (
            f"the model needed repairing (invalid tool calls or answers) in {len(repair_turns)} turns "
            f"(the agent's max_repair_turns is {agent.max_repair_turns})"
        )
    if agent.max_tokens is not None and run.usage.total_tokens >= agent.max_tokens:
        return f"used {run.usage.total_tokens} tokens (the agent's max_tokens is {agent.max_tokens})"
    cost = run.usage.cost_micro_usd / 1_000_000
    if agent.max_cost_usd is not None and cost >= agent.max_cost_usd:
        return f"cost ${cost:.4f} (the agent's max_cost_usd is ${agent.max_cost_usd:.4f})"
    return None


def _calls_limit(agent: Agent, history: list[HistoryItem]) -> str | None:
    """Checked on each reply with calls: run-wide call count, and the same call repeated."""
    calls = [c for i in history if isinstance(i, AssistantMessage) for c in i.tool_calls]
    if len(calls) > agent.max_tool_calls:
        return f"the model asked for {len(calls)} tool calls (the agent's max_tool_calls is {agent.max_tool_calls})"
    seen: dict[tuple[str, str], int] = {}
    for call in calls:
        key = (call.name, _canonical(call.arguments))
        seen[key] = seen.get(key, 0) + 1
        if seen[key] >= agent.max_identical_calls:
            return (
                f"the model called {call.name} with the same arguments {seen[key]} times "
                f"(the agent's max_identical_calls is {agent.max_identical_calls})"
            )
    return None


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        return arguments


def _ended_status(status: RunStatus) -> DecisionStatus:
    return {
        RunStatus.SUCCEEDED: DecisionStatus.FINAL,
        RunStatus.FAILED: DecisionStatus.FAILED,
    }.get(status, DecisionStatus.LIMIT)


class ToolCallExecutor:
    """One tool call from the queue: run it once, store its result, tell Step Functions."""

    def __init__(
        self, store: HistoryStore, reporter: TaskReporter, starter: ExecutionStarter, heartbeat_every: float
    ) -> None:
        self._store = store
        self._reporter = reporter
        self._starter = starter
        self._heartbeat_every = heartbeat_every

    def execute(self, message: ToolCallMessage, lease_seconds: int, attempt: int = 1) -> CallOutcome | None:
        """The call's outcome, or None when it was handed to a child run, which answers it."""
        result = self._store.get_item(message.run_id, message.seq)
        if result is None:
            result = self._run(message, lease_seconds, attempt)
        if result is None:
            return None
        assert isinstance(result, ToolResult)
        outcome = CallOutcome(call_id=result.call_id, status=result.status)
        self._reporter.succeed(message.task_token, outcome.model_dump(exclude_none=True))
        return outcome

    def _run(self, message: ToolCallMessage, lease_seconds: int, attempt: int) -> HistoryItem | None:
        if not self._store.claim_call(message.run_id, message.seq, lease_seconds):
            raise CallInProgressError(f"call {message.call_id} is being run by another delivery")
        try:
            run = self._store.get_run(message.run_id)
            reply = self._store.get_item(message.run_id, message.message_seq)
            assert isinstance(reply, AssistantMessage), "message_seq does not point at a model reply"
            call = next(c for c in reply.tool_calls if c.id == message.call_id)
            context = ToolContext(
                run_id=run.run_id,
                agent=run.agent,
                call_id=call.id,
                caller=run.caller,
                state=RunState(self._store.load_state(run.run_id)),
            )
            agent = get_agent(run.agent)
            child_agent = agent.registry.get(call.name).child_agent if call.name in agent.registry else None
            if child_agent is None:
                with self._heartbeats(message.task_token):
                    execution = _execute_with_hooks(agent, call, context, run.tools)
                self._store.save_state(run.run_id, *context.state.changes())
            elif self._delegate(run, reply, call, child_agent, message):
                return None
            else:
                message_text = f"Error: no agent named '{child_agent}' is registered."
                execution = Execution(message_text, "error", 0, "UnknownAgentError")
        except BaseException:
            # A system error: free the call so the redelivery can run it at once.
            self._store.release_call(message.run_id, message.seq)
            raise
        content, detail, ref, chars = execution.content, None, None, None
        if execution.error_type == "ToolExecutionError" and agent.on_tool_error == "generic":
            content, detail = f"Error: the tool '{call.name}' failed.", execution.content
        elif agent.max_result_chars is not None and len(content) > agent.max_result_chars:
            ref, chars = self._store.put_result(message.run_id, message.seq, content), len(content)
            content = (
                f"{content[: agent.max_result_chars]}\n[… result truncated: {chars} characters in all, "
                f"the first {agent.max_result_chars} shown. Whole result stored as {ref}.]"
            )
        result = ToolResult(
            seq=message.seq,
            turn=reply.turn,
            call_id=call.id,
            tool=call.name,
            content=content,
            status=execution.status,
            duration_ms=execution.duration_ms,
            error_type=execution.error_type,
            attempts=attempt,
            error_detail=detail,
            full_result_ref=ref,
            full_result_chars=chars,
        )
        if not self._store.append(message.run_id, result):
            stored = self._store.get_item(message.run_id, message.seq)
            assert stored is not None
            return stored
        return result

    def _delegate(
        self,
        run: RunRecord,
        reply: AssistantMessage,
        call: ToolCall,
        child_agent: str,
        message: ToolCallMessage,
    ) -> bool:
        """Start the child run that answers this call; False if its agent does not exist."""
        try:
            get_agent(child_agent)
        except UnknownAgentError:
            return False
        task = str(get_agent(run.agent).registry.get(call.name).parse_arguments(call.arguments)["task"])
        # Named by the parent's call: a redelivered message finds the child already there.
        child_id = hashlib.sha256(f"{run.run_id}:{message.seq}".encode()).hexdigest()[:32]
        self._store.put_parent_token(child_id, message.task_token)
        child = RunRecord(
            run_id=child_id,
            agent=child_agent,
            status=RunStatus.RUNNING,
            timezone=run.timezone,
            caller=run.caller,
            parent=ParentCall(
                run_id=run.run_id, call_id=call.id, seq=message.seq, turn=reply.turn, tool=call.name
            ),
        )
        self._store.create_run(child, UserMessage(seq=1, turn=0, content=task))
        self._starter.start(child_id)
        return True

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


def _execute_with_hooks(
    agent: Agent, call: ToolCall, context: ToolContext, allowed: list[str] | None
) -> Execution:
    before = BeforeTool(run_id=context.run_id, agent=agent.name, call=call, context=context)
    for hooks in agent.hooks:
        hooks.before_tool(before)
        if before.blocked is not None or before.result is not None:
            break
    if before.blocked is not None:
        execution = Execution(f"Error: Blocked: {before.blocked}", "error", 0, "BlockedByHook")
    elif before.result is not None:
        execution = Execution(before.result, "ok", 0)
    else:
        execution = agent.registry.execute(before.call, context, allowed=allowed)
    after = AfterTool(run_id=context.run_id, agent=agent.name, call=before.call, execution=execution)
    for hooks in agent.hooks:
        hooks.after_tool(after)
    return after.execution


def monotonic_deadline(remaining_ms: int) -> float:
    return time.monotonic() + remaining_ms / 1000
