"""One orchestrator invocation: at most one model call, then a decision for the state machine."""

import contextlib
import json
import time

from pydantic import ValidationError

from shared.agents import AfterModel, Agent, BeforeModel, get_agent
from shared.errors import (
    ModelVisibleError,
    ToolNotAllowedError,
    TooManyCallsError,
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
    RunRecord,
    RunStatus,
    StepRequest,
    ToolResult,
    UserMessage,
)
from shared.model import ModelClient, to_openai_messages
from shared.runs.ports import TaskReporter
from shared.runs.rules import (
    budget_reached,
    calls_limit,
    direct_answer,
    ended_status,
    final_output,
    tool_failure,
)
from shared.settings import CallTimeouts


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
            return Decision(status=ended_status(run.status), turn=run.turn)
        if run.parent is not None:
            # The parent's call waits with a heartbeat timeout: each step of the child is a beat.
            token = self._store.get_parent_token(run.run_id)
            if token is not None:
                self._reporter.heartbeat(token)
        if last_reply is not None:
            answered = {i.call_id for i in history if isinstance(i, ToolResult)}
            pending = [c for c in last_reply.tool_calls if c.id not in answered]
            came_back = {o.call_id for o in request.results} & {c.id for c in last_reply.tool_calls}
            if not came_back and (history[-1] is last_reply or pending):
                # This step already stored its reply and died before returning (the reply may be
                # followed by error results the step wrote for invalid calls): decide again from
                # the stored reply instead of asking the model a second time.
                return self._decide(run, agent, last_reply, history)
            history.extend(self._record_missing_results(run, last_reply, answered, request))
            failure = tool_failure(agent, last_reply, history)
            if failure is not None:
                self._finish(run, RunStatus.FAILED, error=failure)
                return Decision(status=DecisionStatus.FAILED, turn=run.turn)
            direct = direct_answer(agent, last_reply, history)
            if direct is not None:
                self._finish(run, RunStatus.SUCCEEDED, output=direct)
                return Decision(status=DecisionStatus.FINAL, turn=run.turn)

        limit = budget_reached(run, agent, history)
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
                output = final_output(agent, reply.content or "")
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
        limit = calls_limit(agent, history)
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


def monotonic_deadline(remaining_ms: int) -> float:
    return time.monotonic() + remaining_ms / 1000
