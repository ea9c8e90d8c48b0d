"""One orchestrator invocation: settle the last turn, check the budgets, at most one model
call, then a decision for the state machine."""

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pydantic import ValidationError

from toolpipe.shared.agents import AfterModel, Agent, BeforeModel, transfer_specs
from toolpipe.shared.agents.app import loaded_version
from toolpipe.shared.agents.errors import UnknownAgentError
from toolpipe.shared.errors import ErrorKind, describe_validation_error, error_text
from toolpipe.shared.history import HistoryStore
from toolpipe.shared.history.ports import reply_usage
from toolpipe.shared.messages import (
    AssistantMessage,
    CallOutcome,
    Decision,
    DecisionStatus,
    FailRequest,
    HandoffRecord,
    HistoryItem,
    OutOfTimeRequest,
    RunRecord,
    RunStatus,
    StepRequest,
    ToolResult,
    Usage,
    UserMessage,
    utc_now,
)
from toolpipe.shared.model import ModelClient, ModelReply, to_openai_messages
from toolpipe.shared.model.errors import ModelRateLimitedError
from toolpipe.shared.runs import children
from toolpipe.shared.runs.active_time import ActiveTime
from toolpipe.shared.runs.calls import assign_call_ids, result_slot
from toolpipe.shared.runs.catalog import AgentCatalog
from toolpipe.shared.runs.events import NO_EVENTS, EventPublisher
from toolpipe.shared.runs.executions import execution_number, needs_fresh_execution
from toolpipe.shared.runs.handoffs import Chain, allowed_tools, filtered_history, follow
from toolpipe.shared.runs.ports import ExecutionStarter, TaskReporter
from toolpipe.shared.runs.rate_governor import Go, RateGovernor, Stop, Wait, model_call_key
from toolpipe.shared.runs.recorder import ResultRecorder, whole_result, whole_text
from toolpipe.shared.runs.resume import in_resumed_execution, resumed_after
from toolpipe.shared.runs.rules import (
    budget_reached,
    calls_limit,
    direct_results,
    ended_status,
    final_output,
    tool_failure,
    tree_budget_reached,
)
from toolpipe.shared.runs.starter import tools_for
from toolpipe.shared.runs.time_limit import not_completed_reason, out_of_time_reason
from toolpipe.shared.runs.triggers import AnswerWriter
from toolpipe.shared.runs.turn_plan import TurnPlan, TurnPlanner
from toolpipe.shared.settings import CallTimeouts


class UnapprovedCalls(Protocol):
    def unanswered(self, run: RunRecord, seq: int) -> tuple[str, ErrorKind] | None:
        """The result for a gated call that was never dispatched (denied or expired), else None."""
        ...


@dataclass
class _Step:
    """What one invocation works on."""

    run: RunRecord
    agent: Agent
    history: list[HistoryItem]
    # The tree's totals as last read or counted (a root run's come with its record); None: read them.
    tree: Usage | None = None
    # The agents the history has answered with (see shared/runs/handoffs.py), once followed.
    chain: Chain | None = None

    @property
    def last_reply(self) -> AssistantMessage | None:
        return next((i for i in reversed(self.history) if isinstance(i, AssistantMessage)), None)


class ModelStep:
    """One invocation of the orchestrator: at most one model call."""

    def __init__(
        self,
        store: HistoryStore,
        model: ModelClient,
        default_model: str,
        timeouts: CallTimeouts,
        reporter: TaskReporter,
        starters: Callable[[str], ExecutionStarter],
        *,
        agents: AgentCatalog,
        events: EventPublisher = NO_EVENTS,
        answers: AnswerWriter | None = None,
        approvals: UnapprovedCalls | None = None,
        governor: RateGovernor | None = None,
        active_time: ActiveTime | None = None,
    ) -> None:
        """`agents`: where the step finds the agents a run names (production: the app's
        registry, `RegisteredAgents`)."""
        self._store = store
        self._agents = agents
        self._planner = TurnPlanner(agents, timeouts)
        self._model = model
        self._default_model = default_model
        self._timeouts = timeouts
        self._reporter = reporter
        self._starters = starters
        # Where a run an S3 object started writes its ending (shared/runs/triggers.py).
        self._answers = answers
        self._events = events
        self._results = ResultRecorder(store, events)
        # Gated calls a person denied, or that expired, get their result from the approval.
        self._approvals = approvals
        # The model's rate limit, shared by all runs (None: each call meets it alone).
        self._governor = governor
        # A run whose waits for people do not count: its active time, checked before each turn.
        self._active_time = active_time

    def step(self, request: StepRequest, deadline: float) -> Decision:
        # The step's events (results it wrote, the run's ending) go out together as it returns.
        with self._events.deferred():
            return self._step(request, deadline)

    def _step(self, request: StepRequest, deadline: float) -> Decision:
        run = self._store.get_run(request.run_id)
        if run.status is not RunStatus.RUNNING:
            # A retried ending may have died between recording it and answering the parent, or
            # stamping the run's expiry on its items.
            self._store.expire_ended(run.run_id)
            self._answer_parent_as_recorded(run)
            self._write_answer(run)
            return Decision(status=ended_status(run.status), turn=run.turn)
        if (
            request.execution
            and request.state_machine_arn
            and execution_number(request.execution) < run.execution
        ):
            # This execution already handed the run on and died before returning: make sure
            # the next one runs (starting it again does nothing), and end this one.
            self._starters(request.state_machine_arn).start(
                run.run_id, run.execution, run.deadline, run.max_duration_waits
            )
            return Decision(status=DecisionStatus.CONTINUED, turn=run.turn)
        if in_resumed_execution(run):
            # Nothing of a running run expires: the stamps and tags its ending gave go, here in
            # the execution, not in the API's resume (no 29 s bound; a failure fails this step,
            # and a resume of the run does it again).
            self._store.keep_resumed(run.run_id, run.execution)
        history = self._store.load_history(run.run_id)
        last = next((i for i in reversed(history) if isinstance(i, AssistantMessage)), None)
        # A stored reply is decided and settled by the agent that made it; the next model call is
        # the agent's the history hands the run to (`_hand_over`).
        agent = self._agents.in_run(run, run.current_agent if last is None else last.agent)
        step = _Step(run, agent, history, run.tree_usage)
        children.heartbeat_parent(self._store, self._reporter, run)
        reply = step.last_reply
        if reply is not None:
            if self._is_retry(step, reply, request):
                # This step already stored its reply and died before returning: decide again
                # from the stored reply instead of asking the model a second time.
                self._record_usage(step, reply)
                return self._decide(step, reply)
            ended = self._settle_turn(step, reply, request)
            if ended is not None:
                return ended
        ended = self._hand_over(step)
        if ended is not None:
            return ended
        ended = self._check_budgets(step)
        if ended is not None:
            return ended
        waits = self._governor.waits(step.run) if self._governor is not None else 0
        checks = self._active_time.checks(step.run) if self._active_time is not None else 0
        if request.state_machine_arn and needs_fresh_execution(
            step.run, step.agent, step.history, waits, deadline_checks=checks
        ):
            return self._continue_in_fresh_execution(
                step, self._starters(request.state_machine_arn), request, deadline
            )
        asked = self._ask_model(step, deadline)
        return asked if isinstance(asked, Decision) else self._decide(step, asked)

    # --- phases -----------------------------------------------------------------------------

    @staticmethod
    def _is_retry(step: _Step, reply: AssistantMessage, request: StepRequest) -> bool:
        """No outcome came back for the reply's calls, and some are unanswered or it is the
        last item (invalid calls get their error results right after it, from the same step)."""
        slots = {result_slot(reply, i) for i in range(len(reply.tool_calls))}
        if {o.seq for o in request.results} & slots:
            return False
        answered = {i.seq for i in step.history if isinstance(i, ToolResult)}
        return step.history[-1] is reply or bool(slots - answered)

    def _settle_turn(self, step: _Step, reply: AssistantMessage, request: StepRequest) -> Decision | None:
        """Error results for calls that came back without one; then the answer policies."""
        missing = self._record_missing_results(step.run, reply, step.history, request)
        if missing:
            # Written after the turn's other results but for earlier slots: the model reads the
            # turn in call order, as the store holds it.
            step.history.extend(missing)
            step.history.sort(key=lambda item: item.seq)
        failure = tool_failure(step.agent, reply, step.history)
        if failure is not None and not resumed_after(step.run, reply.turn):
            return self._end(step.run, RunStatus.FAILED, DecisionStatus.FAILED, error=failure)
        direct = direct_results(step.agent, reply, step.history)
        if direct:
            # The whole results, not the previews the model would have read.
            output = "\n\n".join(whole_result(self._store, r) for r in direct)
            return self._end(step.run, RunStatus.SUCCEEDED, DecisionStatus.FINAL, output=output)
        return None

    def _hand_over(self, step: _Step) -> Decision | None:
        """The agent the history says answers next: a transfer or an escalate in the turn just
        settled moves the run; the record and the run events follow, once."""
        run = step.run
        chain = step.chain = follow(run.agent, step.history)
        if chain.ended_by is not None:
            return self._escalated_out(step, chain.ended_by)
        known = len(run.handoffs)
        if len(chain.handoffs) > known:
            # The changes recorded already keep what was recorded (their tool sets); the new
            # ones get the tool set of the agent they move to.
            handoffs = [*run.handoffs, *(self._with_tools(step, h) for h in chain.handoffs[known:])]
            if self._store.record_handoffs(run.run_id, handoffs, chain.active, known):
                for handoff in handoffs[known:]:
                    self._events.run_handed_off(run, handoff)
            step.run = run.model_copy(update={"active_agent": chain.active, "handoffs": handoffs})
        if chain.active != step.agent.name:
            try:
                step.agent = self._agents.in_run(run, chain.active)
            except UnknownAgentError:
                error = f"the run was handed to the agent '{chain.active}', which is no longer deployed"
                return self._end(step.run, RunStatus.FAILED, DecisionStatus.FAILED, error=error)
        return None

    def _escalated_out(self, step: _Step, result: ToolResult) -> Decision:
        """An escalate with no agent to return to: the run ends with that call's result, which
        must be the agent's `output_type` JSON when it has one, as any answer of it."""
        text = whole_result(self._store, result)
        try:
            output = final_output(step.agent, text)
        except ValidationError as e:
            error = (
                f"the tool '{result.tool}' escalated out of the run, and its result is not the answer "
                f"the agent must give: {describe_validation_error(e, '(answer)')}"
            )
            return self._end(step.run, RunStatus.FAILED, DecisionStatus.FAILED, error=error)
        return self._end(step.run, RunStatus.SUCCEEDED, DecisionStatus.FINAL, output=output)

    def _with_tools(self, step: _Step, handoff: HandoffRecord) -> HandoffRecord:
        """The change with the tools its agent may use: its tool provider's choice for the run's
        prompt and caller, narrowed by the caller's allow-list (as the first agent's are)."""
        if handoff.to_agent == step.run.agent:
            return handoff  # back to the agent that started the run: the run's own set
        try:
            agent = self._agents.get(handoff.to_agent)
        except UnknownAgentError:
            return handoff  # the switch fails the run, with a clearer word (below)
        run = step.run
        first = step.history[0]
        prompt = first.content if isinstance(first, UserMessage) else ""
        tools = tools_for(
            agent, prompt, run.caller, run.requested_tools, reads_input=run.input_object is not None
        )
        return handoff.model_copy(update={"tools": tools})

    def _check_budgets(self, step: _Step) -> Decision | None:
        limit = budget_reached(step.run, step.agent, step.history) or self._tree_limit(step)
        if limit is None and self._active_time is not None and self._active_time.passed(step.run):
            limit = out_of_time_reason(step.run)
        if limit is None:
            return None
        return self._end(step.run, RunStatus.LIMIT, DecisionStatus.LIMIT, error=limit)

    def _tree_limit(self, step: _Step, calls_only: bool = False) -> str | None:
        """The root agent's budgets over the run's whole tree (itself, when it has no parent)."""
        root_id = step.run.root_run_id or step.run.run_id
        is_child = root_id != step.run.run_id
        # The agent answering the root run now: a handoff moves the tree's budgets with it.
        root_agent = self._agents.get(self._store.get_run(root_id).current_agent) if is_child else step.agent
        tree = step.tree if step.tree is not None else self._store.tree_usage(root_id)
        return tree_budget_reached(root_agent, tree, is_child, calls_only)

    def _continue_in_fresh_execution(
        self, step: _Step, starter: ExecutionStarter, request: StepRequest, deadline: float
    ) -> Decision:
        """Hand the run to a new execution before this one nears the history-event limit.
        Recorded first: a retry of this step finds the next execution named and started."""
        following = step.run.execution + 1
        if not self._store.set_execution(step.run.run_id, following, step.run.turn):
            # Ended (a cancel), deleted or resumed since this step read it: decided again from the record.
            return self._step(request, deadline)
        starter.start(step.run.run_id, following, step.run.deadline, step.run.max_duration_waits)
        return Decision(status=DecisionStatus.CONTINUED, turn=step.run.turn)

    def _ask_model(self, step: _Step, deadline: float) -> AssistantMessage | Decision:
        run, agent = step.run, step.agent
        read = self._read_by_agent(step)
        if isinstance(read, str):
            return self._end(run, RunStatus.FAILED, DecisionStatus.FAILED, error=read)
        model = agent.model or self._default_model
        governor, call = self._governor, model_call_key(run, step.history[-1].seq)
        if governor is not None:
            # Before the hooks: a run that waits asks again when it wakes, and its before_model
            # hooks run once per model call, not once per wake-up. A hook that then answers in
            # the model's place leaves the slot it took unused: one slot of the rate, no call.
            admission = governor.admit(run, model, call)
            if not isinstance(admission, Go):
                return self._held(run, admission)
        tools = agent.registry.specs(only=allowed_tools(run, agent.name))
        offered = transfer_specs(agent, self._agents.get)
        # A transfer's name wins over a tool source's tool of the same name (listed at run time).
        transfers = {t["function"]["name"] for t in offered}
        before = BeforeModel(
            run_id=run.run_id,
            agent=agent.name,
            messages=to_openai_messages(agent.system_prompt(run.timezone), read),
            tools=[*(t for t in tools if t["function"]["name"] not in transfers), *offered],
        )
        for hooks in agent.hooks:
            hooks.before_model(before)
        started_at = utc_now()
        try:
            reply = before.reply or self._model.complete(
                model=model,
                messages=before.messages,
                tools=before.tools,
                deadline=deadline,
            )
        except ModelRateLimitedError as e:
            assert governor is not None  # only a governed client raises it
            return self._held(run, governor.rate_limited(run, model, e.retry_after, str(e)))
        after = AfterModel(run_id=run.run_id, agent=agent.name, reply=reply)
        for hooks in agent.hooks:
            hooks.after_model(after)
        # A hook that answered in the model's place made no model call: no span for one.
        return self._store_reply(step, after.reply, started_at, None if before.reply else model)

    def _held(self, run: RunRecord, admission: Wait | Stop) -> Decision:
        """The rate governor holds the call: the run waits in the state machine, or ends at a limit."""
        if isinstance(admission, Stop):
            return self._end(run, RunStatus.LIMIT, DecisionStatus.LIMIT, error=admission.reason)
        self._events.model_rate_limited(run, admission.seconds, admission.reason)
        return Decision(status=DecisionStatus.WAIT, turn=run.turn, wait_seconds=admission.seconds)

    def _read_by_agent(self, step: _Step) -> list[HistoryItem] | str:
        """What the answering agent reads of the history: all of it, unless the transfer that
        made it answer has a history filter; then that filter's view of the turns before it.
        A filter that fails: why, in a line (the run cannot go on without it)."""
        entered = step.chain.entered_by if step.chain is not None else None
        if entered is None:
            return step.history
        try:
            source = self._agents.get(entered.from_agent)
        except UnknownAgentError:
            return step.history
        handoff = (source.transfer_named(entered.via) if entered.via else None) or source.transfer_to(
            entered.to_agent
        )
        if handoff is None or handoff.input_filter is None:
            return step.history
        before = [i for i in step.history if i.turn < entered.turn]
        filtered = filtered_history(handoff, before)
        if isinstance(filtered, str):
            return f"the input_filter of the handoff {entered.from_agent} -> {entered.to_agent} {filtered}"
        return [*filtered, *(i for i in step.history if i.turn >= entered.turn)]

    def _store_reply(
        self, step: _Step, reply: ModelReply, started_at: str, model: str | None
    ) -> AssistantMessage:
        run, agent = step.run, step.agent
        seq = max(i.seq for i in step.history) + 1
        calls = assign_call_ids(reply.tool_calls, seq, step.history)
        cost = agent.price.micro_usd(reply.prompt_tokens, reply.completion_tokens) if agent.price else 0
        used = Usage(
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            model_calls=1,
            cost_micro_usd=cost,
            tool_calls=len(calls),
        )
        item = AssistantMessage(
            seq=seq,
            turn=run.turn + 1,
            content=reply.content,
            tool_calls=calls,
            usage=used,
            agent=agent.name,
            started_at=started_at,
            app_version=loaded_version(),
        )
        # Stored and counted (`_record_usage`) in one call of the store's: the count's answer
        # says whether the run ended meanwhile, as a read after the append would.
        appended = self._store.append_reply(run.run_id, item, run.root_run_id)
        if not appended.appended:
            # Another invocation of this step stored its reply first: act on that one.
            stored = self._store.get_item(run.run_id, seq)
            assert isinstance(stored, AssistantMessage), "history slot after the last item holds a non-reply"
            item = stored
            self._record_usage(step, item)
        else:
            step.tree = appended.tree
            if model is not None:
                self._events.model_called(run, item, model, reply.finish_reason, reply.response_model)
        step.history.append(item)
        return item

    def _record_usage(self, step: _Step, reply: AssistantMessage) -> None:
        """Count the reply's model call in the run and its tree, once: the store refuses a turn
        it has counted, so a step retried after storing its reply counts it if it was not."""
        # The totals just counted; None (counted before) leaves them to be read when needed.
        step.tree = self._store.record_model_call(
            step.run.run_id, reply.turn, reply_usage(reply), step.run.root_run_id
        )

    def _record_missing_results(
        self, run: RunRecord, reply: AssistantMessage, history: list[HistoryItem], request: StepRequest
    ) -> list[ToolResult]:
        """Error results for calls whose worker never wrote one: crashed, timed out, cut off."""
        answered = {i.seq for i in history if isinstance(i, ToolResult)}
        outcomes = {o.seq: o for o in request.results}
        written = []
        for index, call in enumerate(reply.tool_calls):
            seq = result_slot(reply, index)
            if seq in answered:
                continue
            outcome = outcomes.get(seq)
            reason = outcome.error if outcome and outcome.error else "no result was recorded"
            unapproved = self._approvals.unanswered(run, seq) if self._approvals is not None else None
            content, kind = unapproved or (
                error_text(f"the tool call did not complete ({reason})."),
                ErrorKind.NOT_COMPLETED,
            )
            item = ToolResult(
                seq=seq,
                turn=reply.turn,
                call_id=call.id,
                tool=call.name,
                content=content,
                status="error",
                error_type=kind,
                error_detail=reason,
            )
            # A worker's result that landed between the read and now wins.
            written.append(self._results.record(run, item).result)
        return written

    def _decide(self, step: _Step, reply: AssistantMessage) -> Decision:
        if not reply.tool_calls:
            return self._answer(step, reply)
        limit = calls_limit(step.agent, step.history) or self._tree_limit(step, calls_only=True)
        if limit is not None:
            return self._end(step.run, RunStatus.LIMIT, DecisionStatus.LIMIT, error=limit)
        return self._apply(step, self._planner.plan(step.run, step.agent, step.history, reply))

    def _apply(self, step: _Step, plan: TurnPlan) -> Decision:
        """Carry out the turn's plan: the results the step gives itself, recorded in call order
        (a transfer is followed by the next step, from its result); the rest, the decision."""
        for answer in plan.answers:
            self._results.record(step.run, answer.result(plan.turn))
        calls = list(plan.calls)
        if not plan.deferred:
            return Decision(status=DecisionStatus.TOOL_CALLS, turn=plan.turn, calls=calls)
        # Every call of a gated turn says whether it waits: the gated Map's Choice reads it.
        timeouts = self._timeouts
        calls = [
            c.model_copy(
                update={
                    "needs_approval": bool(c.needs_approval),
                    "deferred": c.deferred or "none",
                    "approval_timeout_seconds": c.approval_timeout_seconds
                    or timeouts.approval_timeout_seconds,
                }
            )
            for c in calls
        ]
        return Decision(status=DecisionStatus.TOOL_CALLS, turn=plan.turn, calls=calls, gated=True)

    def _answer(self, step: _Step, reply: AssistantMessage) -> Decision:
        try:
            output = final_output(step.agent, reply.content or "")
        except ValidationError as e:
            # Ask again: the next model step sees this message; repair turns are bounded.
            self._store.append(
                step.run.run_id,
                UserMessage(
                    seq=reply.seq + 1,
                    turn=reply.turn,
                    repair=True,
                    content="Your final answer does not match the required JSON Schema: "
                    f"{describe_validation_error(e, '(answer)')}. Reply again with only the JSON object.",
                ),
            )
            return Decision(status=DecisionStatus.TOOL_CALLS, turn=reply.turn)
        return self._end(step.run, RunStatus.SUCCEEDED, DecisionStatus.FINAL, output=output)

    # --- endings ----------------------------------------------------------------------------

    def fail(self, request: FailRequest) -> None:
        error = str(request.error.get("Error", "Error"))
        cause = str(request.error.get("Cause", ""))
        with contextlib.suppress(ValueError, AttributeError, RecursionError):
            # A Lambda function error's cause is the function's error JSON.
            cause = str(json.loads(cause).get("errorMessage", cause))
        run = self._store.get_run(request.run_id)
        if request.execution is not None and request.execution < run.execution:
            return  # an earlier execution's ending: the run went on in a later one (resumed)
        with self._events.deferred():
            self._finish(run, RunStatus.FAILED, error=f"{error}: {cause}" if cause else error)

    def out_of_time(self, request: OutOfTimeRequest) -> None:
        """The run's deadline passed (the state machine's timer stopped the loop): the calls of
        its last turn that have no result are answered as not completed; the run ends `limit`."""
        run = self._store.get_run(request.run_id)
        with self._events.deferred():
            if run.status is RunStatus.RUNNING:
                history = self._store.load_history(run.run_id)
                reply = next((i for i in reversed(history) if isinstance(i, AssistantMessage)), None)
                if reply is not None:
                    why = not_completed_reason(run)
                    cut = [
                        CallOutcome(seq=result_slot(reply, i), status="error", error=why)
                        for i in range(len(reply.tool_calls))
                    ]
                    self._record_missing_results(
                        run, reply, history, StepRequest(run_id=run.run_id, results=cut)
                    )
            self._finish(run, RunStatus.LIMIT, error=out_of_time_reason(run))

    def _end(
        self,
        run: RunRecord,
        status: RunStatus,
        decision: DecisionStatus,
        output: str | None = None,
        error: str | None = None,
    ) -> Decision:
        self._finish(run, status, output=output, error=error)
        return Decision(status=decision, turn=run.turn)

    def _finish(
        self, run: RunRecord, status: RunStatus, output: str | None = None, error: str | None = None
    ) -> None:
        """Every ending of a run: record it, and answer the parent's call if this is a child run."""
        if self._store.finish_run(run.run_id, status, output=output, error=error):
            self._events.run_ended(self._store, run.run_id)
            children.answer_parent(
                self._store, self._reporter, run, status, output, error, self._events, self._agents
            )
            if run.input_object is not None:
                self._write_answer(self._store.get_run(run.run_id))
        else:
            # It had ended already (a retry, or the execution-status rule after the state
            # machine's own Catch): the parent gets the first ending, never a later one.
            ended = self._store.get_run(run.run_id)
            self._answer_parent_as_recorded(ended)
            self._write_answer(ended)

    def _write_answer(self, run: RunRecord) -> None:
        """A run an S3 object started writes its ending under the output prefix, once; every
        path that ends a run (or finds it ended, on a retry) calls this."""
        if self._answers is None or run.input_object is None or run.status is RunStatus.RUNNING:
            return
        self._answers.write(run, lambda: whole_text(self._store, run.output, run.output_ref))

    def _answer_parent_as_recorded(self, run: RunRecord) -> None:
        if run.parent is None:
            return
        output = whole_text(self._store, run.output, run.output_ref)
        children.answer_parent(
            self._store, self._reporter, run, run.status, output, run.error, self._events, self._agents
        )


def monotonic_deadline(remaining_ms: int) -> float:
    return time.monotonic() + remaining_ms / 1000
