"""One tool call from the queue: run it once (or hand it to a child run), store its result,
answer the waiting Step Functions task."""

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from shared.agents import AfterTool, Agent, BeforeTool, get_agent
from shared.errors import (
    CallInProgressError,
    UnknownAgentError,
)
from shared.history import HistoryStore
from shared.messages import (
    AssistantMessage,
    CallOutcome,
    HistoryItem,
    ParentCall,
    RunRecord,
    RunStatus,
    ToolCall,
    ToolCallMessage,
    ToolResult,
    UserMessage,
)
from shared.runs.ports import ExecutionStarter, TaskReporter
from shared.tools import Execution, RunState, Tool, ToolContext


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
            agent = get_agent(run.agent)
            tool = agent.registry.get(call.name) if call.name in agent.registry else None
            if tool is None or tool.child_agent is None:
                # State is loaded only for calls that run here: a child run does not read it.
                context = ToolContext(
                    run_id=run.run_id,
                    agent=run.agent,
                    call_id=call.id,
                    caller=run.caller,
                    state=RunState(self._store.load_state(run.run_id)),
                )
                with self._heartbeats(message.task_token):
                    execution = _execute_with_hooks(agent, call, context, run.tools)
                self._store.save_state(run.run_id, *context.state.changes())
            elif self._delegate(run, reply, call, tool, message):
                return None
            else:
                message_text = f"Error: no agent named '{tool.child_agent}' is registered."
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
        tool: Tool,
        message: ToolCallMessage,
    ) -> bool:
        """Start the child run that answers this call; False if its agent does not exist."""
        assert tool.child_agent is not None
        try:
            get_agent(tool.child_agent)
        except UnknownAgentError:
            return False
        task = str(tool.parse_arguments(call.arguments)["task"])
        # Named by the parent's call: a redelivered message finds the child already there.
        child_id = hashlib.sha256(f"{run.run_id}:{message.seq}".encode()).hexdigest()[:32]
        self._store.put_parent_token(child_id, message.task_token)
        child = RunRecord(
            run_id=child_id,
            agent=tool.child_agent,
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
