"""The turn planner: what each call of a model reply gets, decided before anything is written.

A reply's calls are sorted, in call order, into the calls the step answers itself (`Refusal`,
`TransferAnswer`, `HookAnswer`) and the calls the state machine runs or makes wait
(`TurnPlan.calls`), as the OpenAI Agents SDK sorts a reply into a `ProcessedResponse` before it
acts. The model step applies the plan (`ModelStep._apply`): it records the answers and returns
the calls as its decision.

What is pure and what is not: planning writes nothing, publishes nothing and starts nothing.
It reads the reply's agent's tools (a tool source, an MCP server, may list them when first
asked) and the catalog's agents; a child run's transfer also reads which agents its target
reaches from the app's registry (`handoffs.transfer_refusal`). The app's own code runs where its answer decides the plan, and
only in `AppCode`: a handoff's `input_filter` (tried on what it will see) and `on_handoff`, a
tool's approval policy, and the `before_tool`/`after_tool` hooks of a deferred call (no worker
runs them for it). Calls the history has answered already (a step decided again after a crash)
are skipped, so their app code does not run twice.
"""

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from toolpipe.shared.agents import Agent, Handoff, HandoffContext
from toolpipe.shared.agents.errors import UnknownAgentError
from toolpipe.shared.errors import (
    ErrorKind,
    ModelVisibleError,
    describe_exception,
    describe_validation_error,
    error_text,
)
from toolpipe.shared.messages import (
    AssistantMessage,
    CallRef,
    HandoffAction,
    HistoryItem,
    RunRecord,
    ToolCall,
    ToolResult,
)
from toolpipe.shared.runs.calls import result_slot
from toolpipe.shared.runs.catalog import AgentCatalog
from toolpipe.shared.runs.handoffs import allowed_tools, filtered_history, transfer_refusal
from toolpipe.shared.runs.tool_hooks import after_hooks, before_hooks
from toolpipe.shared.settings import CallTimeouts
from toolpipe.shared.tools import Tool, ToolContext
from toolpipe.shared.tools.errors import ToolNotAllowedError, TooManyCallsError
from toolpipe.shared.tools.registry import Execution


@dataclass(frozen=True)
class Refusal:
    """A call refused before anything ran: an unknown tool, one outside the run's set, invalid
    arguments, or a call over the agent's per-turn limit."""

    seq: int
    call: ToolCall
    text: str  # what the model reads
    kind: ErrorKind

    def result(self, turn: int) -> ToolResult:
        return _result(self.seq, turn, self.call, Execution(self.text, "error", 0, self.kind))


@dataclass(frozen=True)
class TransferAnswer:
    """The model's `transfer_to_<agent>` call, never dispatched: made (`action`, which the next
    step follows) or refused (`kind`). One per reply counts."""

    seq: int
    call: ToolCall
    text: str
    kind: ErrorKind | None
    action: HandoffAction | None

    def result(self, turn: int) -> ToolResult:
        outcome = Execution(self.text, "ok" if self.kind is None else "error", 0, self.kind)
        return _result(self.seq, turn, self.call, outcome, self.action)


@dataclass(frozen=True)
class HookAnswer:
    """A deferred call a `before_tool` hook answered (its answer, a block, or a refusal of a
    change to the call): nothing waits for a person or a program."""

    seq: int
    call: ToolCall
    outcome: Execution

    def result(self, turn: int) -> ToolResult:
        return _result(self.seq, turn, self.call, self.outcome)


Answer = Refusal | TransferAnswer | HookAnswer


@dataclass(frozen=True)
class TurnPlan:
    """What the step does with a reply's calls that have no result yet, each in call order."""

    turn: int
    answers: tuple[Answer, ...] = ()
    calls: tuple[CallRef, ...] = ()  # dispatched, or waiting for a person or a program

    @property
    def refusals(self) -> tuple[Refusal, ...]:
        return tuple(a for a in self.answers if isinstance(a, Refusal))

    @property
    def transfers(self) -> tuple[TransferAnswer, ...]:
        return tuple(a for a in self.answers if isinstance(a, TransferAnswer))

    @property
    def hook_answers(self) -> tuple[HookAnswer, ...]:
        return tuple(a for a in self.answers if isinstance(a, HookAnswer))

    @property
    def deferred(self) -> tuple[CallRef, ...]:
        """The calls that wait: for a person's approval, or for an answer from outside."""
        return tuple(c for c in self.calls if c.needs_approval or c.deferred)


class TurnPlanner:
    def __init__(self, agents: AgentCatalog, timeouts: CallTimeouts) -> None:
        self._agents = agents
        self._timeouts = timeouts

    def plan(
        self, run: RunRecord, agent: Agent, history: list[HistoryItem], reply: AssistantMessage
    ) -> TurnPlan:
        """The plan for `reply`'s calls, made by `agent`, with `history` as stored (the reply in it)."""
        # A step decided again (after a crash, or in a resumed execution) skips calls with results.
        answered = {i.seq for i in history if isinstance(i, ToolResult)}
        transferred = next(
            (
                i.handoff.agent
                for i in history
                if isinstance(i, ToolResult)
                and i.turn == reply.turn
                and i.handoff
                and i.handoff.by == "model"
            ),
            None,
        )
        answers: list[Answer] = []
        calls: list[CallRef] = []
        for index, call in enumerate(reply.tool_calls):
            seq = result_slot(reply, index)
            if seq in answered:
                continue
            handoff = agent.transfer_named(call.name)
            if handoff is not None and index < agent.max_calls_per_turn:
                transfer = self._transfer(run, agent, history, reply.turn, seq, call, handoff, transferred)
                transferred = transferred or (transfer.action.agent if transfer.action else None)
                answers.append(transfer)
                continue
            planned = self._tool_call(run, agent, reply, index, call)
            if isinstance(planned, CallRef):
                calls.append(planned)
            else:
                answers.append(planned)
        return TurnPlan(reply.turn, tuple(answers), tuple(calls))

    def _tool_call(
        self, run: RunRecord, agent: Agent, reply: AssistantMessage, index: int, call: ToolCall
    ) -> CallRef | Refusal | HookAnswer:
        """A call to one of the agent's tools: refused, answered by a hook, or to dispatch (or wait)."""
        seq = result_slot(reply, index)
        try:
            if index >= agent.max_calls_per_turn:
                raise TooManyCallsError(agent.max_calls_per_turn)
            tool = agent.registry.get(call.name)
            allowed = allowed_tools(run, agent.name)
            if allowed is not None and tool.name not in allowed:
                raise ToolNotAllowedError(call.name)
            arguments = tool.parse_arguments(call.arguments)
        except ModelVisibleError as e:
            return Refusal(seq, call, error_text(str(e)), e.kind)
        context = ToolContext(run_id=run.run_id, agent=agent.name, call_id=call.id, caller=run.caller)
        hooked = AppCode.deferred_call_hooks(agent, call, context) if tool.deferred is not None else None
        if hooked is not None:
            return HookAnswer(seq, call, hooked)
        return CallRef(
            seq=seq,
            message_seq=reply.seq,
            tool=tool.name,
            timeout_seconds=self._timeouts.timeout_seconds,
            heartbeat_seconds=self._timeouts.heartbeat_seconds,
            # Decided here, on the validated arguments, and enforced by the state machine: the
            # call waits for a person before any worker sees it.
            needs_approval=AppCode.needs_approval(tool, arguments, context) or None,
            **self._deferred(tool),
        )

    def _transfer(
        self,
        run: RunRecord,
        agent: Agent,
        history: list[HistoryItem],
        turn: int,
        seq: int,
        call: ToolCall,
        handoff: Handoff,
        taken: str | None,
    ) -> TransferAnswer:
        """The transfer's answer: made unless the reply transferred already (`taken`), the
        target is not deployed or may not take the run, or its input or hooks refuse it."""
        target = handoff.target
        if taken is not None:
            text = error_text(
                f"not transferred: this reply already transferred the run to '{taken}'; only the "
                "first transfer counts."
            )
            return TransferAnswer(seq, call, text, ErrorKind.HANDOFF_REFUSED, None)
        try:
            to = self._agents.get(target)
        except UnknownAgentError:
            text = error_text(f"not transferred: no agent named '{target}' is deployed.")
            return TransferAnswer(seq, call, text, ErrorKind.UNKNOWN_AGENT, None)
        refusal = transfer_refusal(run, agent.name, to)
        if refusal is not None:
            return TransferAnswer(
                seq, call, error_text(f"not transferred: {refusal}."), ErrorKind.HANDOFF_REFUSED, None
            )
        if handoff.input_filter is not None:
            # Tried now, on what it will see, so a filter that fails refuses the transfer here
            # instead of stopping the run after it.
            tried = AppCode.input_filter(handoff, [i for i in history if i.turn < turn])
            if tried is not None:
                text = error_text(f"not transferred to '{target}': its input_filter {tried}")
                return TransferAnswer(seq, call, text, ErrorKind.TOOL_FAILED, None)
        given = None
        if handoff.input_type is not None:
            try:
                given = handoff.input_type.model_validate_json(call.arguments or "{}")
            except ValidationError as e:
                why = describe_validation_error(e, "(arguments)")
                text = error_text(f"invalid arguments for '{call.name}': {why}")
                return TransferAnswer(seq, call, text, ErrorKind.INVALID_ARGUMENTS, None)
        if handoff.on_handoff is not None:
            context = HandoffContext(
                run_id=run.run_id, from_agent=agent.name, to_agent=target, call_id=call.id, caller=run.caller
            )
            failed = AppCode.on_handoff(handoff, context, given)
            if failed is not None:
                text = error_text(f"not transferred to '{target}': on_handoff failed: {failed}")
                return TransferAnswer(seq, call, text, ErrorKind.TOOL_FAILED, None)
        action = HandoffAction(kind="transfer", agent=target, by="model")
        return TransferAnswer(
            seq, call, f"Transferred to {target}: the {target} agent answers from now on.", None, action
        )

    def _deferred(self, tool: Tool) -> dict[str, Any]:
        """A deferred tool's call waits for its answer, never dispatched: for the tool's own time
        (`wait_seconds`), with no heartbeat (nothing beats while a person answers)."""
        if tool.deferred is None:
            return {}
        return {
            "deferred": tool.deferred,
            "approval_timeout_seconds": tool.wait_timeout(self._timeouts.approval_timeout_seconds),
        }


class AppCode:
    """The app's code that planning runs, in one place: each answer decides the plan. Its
    failure is the call's result for the model to read, never the step's."""

    @staticmethod
    def input_filter(handoff: Handoff, items: list[HistoryItem]) -> str | None:
        """Why the handoff's `input_filter` fails on `items` (words that follow "its
        input_filter"), or None when it gives a usable history."""
        filtered = filtered_history(handoff, items)
        return filtered if isinstance(filtered, str) else None

    @staticmethod
    def on_handoff(handoff: Handoff, context: HandoffContext, given: Any) -> str | None:
        """Runs the handoff's `on_handoff`; what it raised, or None."""
        assert handoff.on_handoff is not None
        try:
            handoff.on_handoff(context, given)
        except Exception as e:  # the hook's failure is the transfer's, for the model to read
            return describe_exception(e)
        return None

    @staticmethod
    def needs_approval(tool: Tool, arguments: dict[str, Any], context: ToolContext) -> bool:
        """The tool's approval policy on the validated arguments (it fails closed)."""
        return tool.needs_approval(arguments, context)

    @staticmethod
    def deferred_call_hooks(agent: Agent, call: ToolCall, context: ToolContext) -> Execution | None:
        """The `before_tool` hooks on a deferred call, here since no worker ever sees it: a
        block (or a hook's own answer), through the `after_tool` hooks, is its result and
        nothing waits (None: it waits). A hook that changes the call is refused: the person or
        program would answer other arguments than the model's."""
        try:
            changed, answered = before_hooks(agent, call, context)
        except Exception as e:  # as in the worker: a hook's failure is the call's result, not the step's
            failed = f"Tool '{call.name}' failed: a before_tool hook raised {type(e).__name__}"
            changed, answered = call, Execution.failed(ErrorKind.TOOL_FAILED, failed)
        if answered is None and changed != call:
            answered = Execution.failed(
                ErrorKind.BLOCKED,
                "Blocked: a before_tool hook changed this call, which waits for an answer from "
                "outside; it was not asked.",
            )
        if answered is None:
            return None
        try:
            return after_hooks(agent, changed, answered, context)
        except Exception as e:
            failed = f"Tool '{call.name}' failed: an after_tool hook raised {type(e).__name__}"
            return Execution.failed(ErrorKind.TOOL_FAILED, failed)


def _result(
    seq: int, turn: int, call: ToolCall, outcome: Execution, handoff: HandoffAction | None = None
) -> ToolResult:
    return ToolResult(
        seq=seq,
        turn=turn,
        call_id=call.id,
        tool=call.name,
        content=outcome.content,
        status=outcome.status,
        error_type=outcome.error_type,
        handoff=handoff,
    )
