"""Run events: what happened to a run, published to the stack's EventBridge bus for the rest
of a system to react to (source `toolpipe`; the detail-type is the model's class name).

Events are best-effort notifications, never part of a run: a publish that fails is logged and
dropped, and each send is bounded (short timeouts, one retry), so EventBridge being slow or
down never fails or stalls a run. Each event is published by whoever first records what it
reports (the conditional write that succeeded), so a retried step or a redelivered call does
not publish it again. A detail carries ids, statuses, counts and at most a short preview of a
text (`PREVIEW_CHARS`): never whole contents, arguments or task tokens.

The JSON Schemas of the details are generated from these models and checked in under
`docs/events/`: `make event-schemas` (`python -m infra.event_schemas`) writes them again.
"""

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal

from botocore.config import Config
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue
from pydantic_core import CoreSchema

from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.history.ports import RunRecords
from toolpipe.shared.messages import (
    AssistantMessage,
    HandoffRecord,
    RunRecord,
    RunStatus,
    ToolResult,
    Usage,
    utc_now,
)
from toolpipe.shared.telemetry import NO_SPANS, RunSpans

if TYPE_CHECKING:
    from mypy_boto3_events.client import EventBridgeClient
    from mypy_boto3_events.type_defs import PutEventsRequestEntryTypeDef

    from toolpipe.shared.deferred.models import Approval

logger = logging.getLogger(__name__)

SOURCE = "toolpipe"
PREVIEW_CHARS = 200
# PutEvents takes at most 10 entries a request.
MAX_ENTRIES = 10
# Bounds each publish to about 3 s at worst (two attempts of 0.5 s connect + 1 s read), where a
# healthy PutEvents takes tens of milliseconds: an outage costs a run little time, never a failure.
CLIENT_CONFIG = Config(
    connect_timeout=0.5, read_timeout=1.0, retries={"total_max_attempts": 2, "mode": "standard"}
)
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _time(description: str) -> Any:
    return Field(description=f"{description} (ISO 8601, UTC).", json_schema_extra={"format": "date-time"})


def preview(text: str | None) -> str | None:
    """The first `PREVIEW_CHARS` characters of `text`, with "…" when it was cut."""
    if text is None or len(text) <= PREVIEW_CHARS:
        return text
    return text[: PREVIEW_CHARS - 1] + "…"


class RunEvent(BaseModel):
    """Fields every run event carries."""

    # Fields with a default are always sent too: the schema says they are required.
    model_config = ConfigDict(frozen=True, json_schema_serialization_defaults_required=True)
    run_id: str = Field(description="The run, as `POST /runs` returned it.")
    agent: str = Field(description="The agent the run runs.")
    caller: str | None = Field(
        description="The principal that started the run (for a child run, its root's), e.g. an IAM ARN."
    )
    root_run_id: str = Field(
        description="The run at the top of this run's tree of agent-tool runs (the run itself for a root)."
    )


class RunStarted(RunEvent):
    """A run was created and its execution is being started. A child run (an agent tool's
    call) starts like any other, with `parent_run_id` set."""

    status: Literal["running"] = "running"
    parent_run_id: str | None = Field(description="For a child run: the run whose call it answers.")
    depth: int = Field(ge=0, description="0 for a root run, 1 for its child runs, and so on.")
    started_at: str = _time("When the run was created")


class RunResumed(RunEvent):
    """A run that ended failed or limit goes on from its last stored turn, in a new execution
    (`POST /runs/{id}/resume`): once per resume, never for a retry with the same key."""

    status: Literal["running"] = "running"
    execution: int = Field(ge=2, description="The run's execution it goes on in (its first is 1).")
    turn: int = Field(ge=0, description="The last turn stored; the run goes on after it.")
    ended: Literal["failed", "limit"] = Field(description="How the run had ended.")
    limits: dict[str, float] = Field(description="The limits this resume raised, by the agent's names.")
    resumed_at: str = _time("When it was resumed")


class ToolCallCompleted(RunEvent):
    """A tool call's outcome was stored: once per call, whoever stored it (the worker that ran
    it; the orchestrator for calls it refused or that did not complete; a child run's ending
    for an agent tool's call). Redeliveries that answer from the stored outcome publish nothing."""

    tool: str = Field(description="The tool's name, as the model called it.")
    call_id: str = Field(description="The call's id, as the model was shown it.")
    slot: int = Field(ge=1, description="The call's history slot, which names the call within the run.")
    turn: int = Field(ge=0, description="The model turn that made the call.")
    outcome: Literal["ok", "error"]
    error_kind: ErrorKind | None = Field(description="Why the outcome is an error; null when ok.")
    duration_ms: int | None = Field(description="How long the tool ran; null when it did not run.")
    attempts: int = Field(ge=1, description="The delivery of the call that stored the outcome.")
    result_chars: int = Field(ge=0, description="Length of the whole result.")
    result_preview: str = Field(
        max_length=PREVIEW_CHARS, description=f"The result's first {PREVIEW_CHARS} characters at most."
    )
    completed_at: str = _time("When the outcome was stored")


class _RunEnded(RunEvent):
    parent_run_id: str | None = Field(description="For a child run: the run whose call it answers.")
    turns: int = Field(ge=0, description="Model turns the run took.")
    usage: Usage = Field(description="What the run's own model calls used (not its child runs').")
    started_at: str = _time("When the run was created")
    ended_at: str = _time("When its ending was recorded")
    error_preview: str | None = Field(
        max_length=PREVIEW_CHARS,
        description=f"Why it ended, when not with an answer: the first {PREVIEW_CHARS} characters.",
    )


class RunCompleted(_RunEnded):
    """A run ended with an answer (`succeeded`) or at one of its agent's limits (`limit`,
    `error_preview` naming the setting)."""

    status: Literal["succeeded", "limit"]
    output_chars: int | None = Field(ge=0, description="Length of the whole answer; null without one.")
    output_preview: str | None = Field(
        max_length=PREVIEW_CHARS, description=f"The answer's first {PREVIEW_CHARS} characters."
    )


class RunFailed(_RunEnded):
    """A run failed: the model endpoint refused, a tool failed under `on_tool_error="fail"`, or
    its execution ended outside the run (stopped, timed out)."""

    status: Literal["failed"] = "failed"


class RunCancelled(_RunEnded):
    """A run was cancelled on request."""

    status: Literal["cancelled"] = "cancelled"


class RunHandedOff(RunEvent):
    """The run goes on under another agent from its next turn: the model called a
    `transfer_to_<agent>` tool or a tool asked for a transfer (`transfer`), or a tool gave the
    run back to the agent that handed off to the one answering (`escalate`). Published once per
    change, by the step that recorded it. `agent` stays the agent that started the run."""

    kind: Literal["transfer", "escalate"]
    from_agent: str = Field(description="The agent that answered until now.")
    to_agent: str = Field(description="The agent that answers from the next turn.")
    turn: int = Field(ge=0, description="The model turn whose call made the change.")
    handed_off_at: str = _time("When the change was recorded")


class ApprovalRequested(RunEvent):
    """A tool call waits for a person's decision (`requires_approval`): approve or deny it with
    `POST /approvals/{approval_id}/approve` or `/deny`; or, `kind` `human`, for a person's
    answer to its question (`POST /approvals/{approval_id}/answer`). Published once per call,
    when its approval was first stored. Carries no task token."""

    approval_id: str = Field(description="The approval, as `GET /approvals/{approval_id}` reads it.")
    tool: str = Field(description="The tool's name, as the model called it.")
    call_id: str = Field(description="The call's id, as the model was shown it.")
    slot: int = Field(ge=1, description="The call's history slot, which names the call within the run.")
    arguments_preview: str = Field(
        max_length=PREVIEW_CHARS,
        description=f"The arguments' JSON, first {PREVIEW_CHARS} characters at most.",
    )
    expires_at: str = _time("When the call stops waiting and counts as denied")
    requested_at: str = _time("When the approval was stored")
    callback_url: str | None = Field(
        default=None,
        description="The signed link to the approval's page, where a person approves, denies or "
        "edits the arguments, or (`kind` `human`) answers the question "
        '(README "The approval link"); it works until `expires_at`, once. '
        "Null when the stack knows no API URL.",
    )
    kind: Literal["approval", "human"] = Field(
        default="approval",
        description="`approval`: approve or deny; `human`: a person's answer to `question` is the "
        "result (`POST /approvals/{approval_id}/answer`).",
    )
    question: str | None = Field(
        default=None,
        max_length=PREVIEW_CHARS,
        description=f"A human-input call's question, first {PREVIEW_CHARS} characters at most.",
    )
    waiting_for: Literal["person"] = Field(
        default="person", description="The run now waits for a person, as `GET /runs/{run_id}` says."
    )


# A client-executed call's arguments travel whole in its event up to this size (the program
# needs all of them to run the call); above it, read them from the reply (`arguments_path`).
# EventBridge takes 256 KB an entry; 8 KiB keeps every event small.
EVENT_ARGUMENTS_CHARS = 8_192


class ToolCallRequested(RunEvent):
    """A client-executed call (`deferred="client"`) waits for the caller's program: run it and
    post its result to `POST /runs/{run_id}/calls/{slot}/result` (`result_path`). Published
    once per call. Carries no task token."""

    tool: str = Field(description="The tool's name, as the model called it.")
    call_id: str = Field(description="The call's id, as the model was shown it (informative).")
    slot: int = Field(
        ge=1,
        description="The call's history slot: with `run_id`, what names the call (the `{call_id}` of "
        "the result route is this number).",
    )
    result_path: str = Field(
        description="Where to post the result, under the API's stage: `/runs/{run_id}/calls/{slot}/result`."
    )
    arguments: dict[str, Any] | None = Field(
        description=f"The call's validated arguments, whole when their JSON is at most "
        f"{EVENT_ARGUMENTS_CHARS:,} characters; null above (read `arguments_path`)."
    )
    arguments_chars: int = Field(ge=0, description="The length of the arguments' JSON.")
    arguments_path: str = Field(
        description="The model's reply that made the call, whole: `GET /runs/{run_id}/messages/{seq}`."
    )
    result_schema: dict[str, Any] | None = Field(description="The JSON Schema the result must match, if any.")
    expires_at: str = _time("When the call stops waiting: the model reads that no result came")
    requested_at: str = _time("When the call started to wait")
    waiting_for: Literal["program"] = Field(
        default="program",
        description="The run now waits for the caller's program, as `GET /runs/{run_id}` says.",
    )


class ModelRateLimited(RunEvent):
    """The run waits for the model endpoint's rate limit, in the state machine with no Lambda
    running (shared/runs/rate_governor.py): its turn in the budget the runs of one endpoint and
    model share has not come, or the endpoint answered 429 or asked to wait. Once per wait."""

    turn: int = Field(ge=0, description="The last turn stored; the model call waits after it.")
    wait_seconds: int = Field(ge=1, description="How long the run waits before it asks again.")
    reason: str = Field(max_length=PREVIEW_CHARS, description="Why, in a line.")
    waiting_since: str = _time("When the wait began")


DETAIL_TYPES: tuple[type[RunEvent], ...] = (
    RunStarted,
    RunResumed,
    ToolCallCompleted,
    RunCompleted,
    RunFailed,
    RunCancelled,
    RunHandedOff,
    ApprovalRequested,
    ToolCallRequested,
    ModelRateLimited,
)


def _about(run: RunRecord) -> dict[str, Any]:
    """The fields every run event carries (`RunEvent`), from the run."""
    return {
        "run_id": run.run_id,
        "agent": run.agent,
        "caller": run.caller,
        "root_run_id": run.root_run_id or run.run_id,
    }


def run_started(run: RunRecord) -> RunStarted:
    return RunStarted(
        **_about(run),
        parent_run_id=run.parent.run_id if run.parent else None,
        depth=run.depth,
        started_at=run.created_at,
    )


def run_resumed(run: RunRecord) -> RunResumed:
    """The event for the run's last resume."""
    resume = run.resumes[-1]
    return RunResumed(
        **_about(run),
        execution=resume.execution,
        turn=resume.turn,
        ended=resume.ended.value,
        limits=resume.limits.given() if resume.limits else {},
        resumed_at=resume.at,
    )


def tool_call_completed(run: RunRecord, result: ToolResult) -> ToolCallCompleted:
    return ToolCallCompleted(
        **_about(run),
        tool=result.tool,
        call_id=result.call_id,
        slot=result.seq,
        turn=result.turn,
        outcome=result.status,
        error_kind=result.error_type,
        duration_ms=result.duration_ms,
        attempts=max(1, result.attempts),
        result_chars=result.full_result_chars or len(result.content),
        result_preview=preview(result.content) or "",
        completed_at=result.created_at,
    )


def run_ended(run: RunRecord) -> _RunEnded:
    """The event for a run's recorded ending, by its status."""
    common: dict[str, Any] = {
        **_about(run),
        "parent_run_id": run.parent.run_id if run.parent else None,
        "turns": run.turn,
        "usage": run.usage,
        "started_at": run.created_at,
        "ended_at": run.updated_at,
        "error_preview": preview(run.error),
    }
    status = run.status.value  # by value: a status added later (cancelled) needs no change here
    if status in ("succeeded", "limit"):
        chars = run.output_chars or (len(run.output) if run.output is not None else None)
        return RunCompleted.model_validate(
            common | {"status": status, "output_chars": chars, "output_preview": preview(run.output)}
        )
    if status == RunStatus.FAILED.value:
        return RunFailed(**common)
    if status == "cancelled":
        return RunCancelled(**common)
    raise ValueError(f"run {run.run_id} has not ended (status {status})")


@contextmanager
def _observing(what: str) -> Iterator[None]:
    """Best-effort by design (see the module docstring): telling a moment must not fail a run."""
    try:
        yield
    except Exception:
        logger.warning("%s could not be told", what, exc_info=True)


# Events of the current invocation held back until it is done (see `EventPublisher.deferred`).
# A context variable: the local runtime runs many invocations at once on threads.
_held: ContextVar[list[RunEvent] | None] = ContextVar("held_run_events", default=None)


class EventPublisher:
    """Publishes run events to one bus (with no bus, no `EVENT_BUS_NAME`, none), and tells the
    same moments to the run's trace (`spans`: shared/telemetry; `NO_SPANS` when tracing is off):
    both are told by whoever first recorded the moment, once."""

    def __init__(
        self, client: "EventBridgeClient | None", bus_name: str | None, spans: RunSpans = NO_SPANS
    ) -> None:
        self._client = client
        self._bus = bus_name
        self._spans = spans

    @property
    def enabled(self) -> bool:
        return self._client is not None and bool(self._bus)

    def run_started(self, run: RunRecord) -> None:
        self.publish(lambda: run_started(run))

    def run_resumed(self, run: RunRecord) -> None:
        self.publish(lambda: run_resumed(run))

    def tool_call_completed(self, run: RunRecord, result: ToolResult) -> None:
        self._spans.tool_call_completed(run, result)
        self.publish(lambda: tool_call_completed(run, result))

    def model_called(
        self,
        run: RunRecord,
        reply: AssistantMessage,
        model: str,
        finish_reason: str | None = None,
        response_model: str | None = None,
    ) -> None:
        """A model call whose reply was just stored: a span, no event (the reply's calls and
        the run's ending are the events)."""
        self._spans.model_called(run, reply, model, finish_reason, response_model)

    def wait_ended(self, runs: RunRecords, approval: "Approval") -> None:
        """A deferred call's wait just ended (decided, answered, expired): a span, no event."""
        if self._spans.enabled:
            with _observing("a wait's span"):
                self._spans.wait_ended(runs.get_run(approval.run_id), approval)

    def model_rate_limited(self, run: RunRecord, seconds: int, reason: str) -> None:
        self.publish(
            lambda: ModelRateLimited(
                **_about(run),
                turn=run.turn,
                wait_seconds=seconds,
                reason=preview(reason) or "",
                waiting_since=utc_now(),
            )
        )

    def run_handed_off(self, run: RunRecord, handoff: HandoffRecord) -> None:
        at = utc_now()
        self._spans.run_handed_off(run, handoff, at)
        self.publish(
            lambda: RunHandedOff(
                **_about(run),
                kind=handoff.kind,
                from_agent=handoff.from_agent,
                to_agent=handoff.to_agent,
                turn=handoff.turn,
                handed_off_at=at,
            )
        )

    def approval_requested(
        self, run: RunRecord, approval: "Approval", callback_url: str | None = None
    ) -> None:
        self.publish(
            lambda: ApprovalRequested(
                **_about(run),
                approval_id=approval.approval_id,
                tool=approval.tool,
                call_id=approval.call_id,
                slot=approval.seq,
                arguments_preview=preview(approval.arguments_preview) or "",
                expires_at=approval.expires_at,
                requested_at=approval.created_at,
                callback_url=callback_url,
                kind="human" if approval.kind == "human" else "approval",
                question=preview(approval.question),
            )
        )

    def tool_call_requested(self, run: RunRecord, approval: "Approval", arguments: dict[str, Any]) -> None:
        """A client-executed call waits for the caller's program (`approval`: its record)."""

        def build() -> ToolCallRequested:
            text = json.dumps(arguments, ensure_ascii=False)
            return ToolCallRequested(
                **_about(run),
                tool=approval.tool,
                call_id=approval.call_id,
                slot=approval.seq,
                result_path=f"/runs/{run.run_id}/calls/{approval.seq}/result",
                arguments=arguments if len(text) <= EVENT_ARGUMENTS_CHARS else None,
                arguments_chars=len(text),
                arguments_path=f"/runs/{run.run_id}/messages/{approval.message_seq}",
                result_schema=approval.result_schema,
                expires_at=approval.expires_at,
                requested_at=approval.created_at,
            )

        self.publish(build)

    def run_ended(self, runs: RunRecords, run_id: str) -> None:
        """Publish the ending just recorded for `run_id` (RunCompleted, RunFailed or
        RunCancelled by its status). Call it only when your write recorded the ending: the
        record is read again (only when publishing or tracing is on) for its final usage and times."""
        if not (self.enabled or self._spans.enabled):
            return
        with _observing("a run's ending"):
            ended = runs.get_run(run_id)
            self._spans.run_ended(ended)
            self.publish(lambda: run_ended(ended))

    def publish(self, build: Callable[[], RunEvent]) -> None:
        """Build the event and send it (or hold it, inside `deferred`). Never raises."""
        if not self.enabled:
            return
        try:
            event = build()
        except Exception:
            # Best-effort by design (see the module docstring): a notification must not fail a run.
            logger.warning("a run event could not be built; not published", exc_info=True)
            return
        held = _held.get()
        if held is not None:
            held.append(event)
        else:
            self._send([event])

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold the events published inside the block and send them when it exits, raising or
        not, in as few requests as PutEvents allows: a worker answers its task first and
        publishes after, off the run's path."""
        token = _held.set([])
        try:
            yield
        finally:
            events = _held.get() or []
            _held.reset(token)
            self._send(events)

    def _send(self, events: list[RunEvent]) -> None:
        if not events or self._client is None or not self._bus:
            return
        entries: list[PutEventsRequestEntryTypeDef] = [
            {
                "Source": SOURCE,
                "DetailType": type(event).__name__,
                "Detail": event.model_dump_json(),
                "EventBusName": self._bus,
            }
            for event in events
        ]
        for start in range(0, len(entries), MAX_ENTRIES):
            batch = entries[start : start + MAX_ENTRIES]
            try:
                response = self._client.put_events(Entries=batch)
            except Exception:
                # Best-effort by design: EventBridge unreachable or refusing must not fail a run.
                logger.warning(
                    "run events not published",
                    exc_info=True,
                    extra={"detail_types": [e["DetailType"] for e in batch]},
                )
                continue
            if response.get("FailedEntryCount"):
                failed = [
                    f"{entry['DetailType']}: {result.get('ErrorCode')}"
                    for entry, result in zip(batch, response.get("Entries", []), strict=False)
                    if result.get("ErrorCode")
                ]
                logger.warning("run events refused by EventBridge", extra={"failed": failed})


NO_EVENTS = EventPublisher(None, None)


class _Draft202012(GenerateJsonSchema):
    def generate(self, schema: CoreSchema, mode: JsonSchemaMode = "validation") -> JsonSchemaValue:
        return {"$schema": SCHEMA_DIALECT, **super().generate(schema, mode)}


def schemas() -> dict[str, dict[str, Any]]:
    """Each detail-type's JSON Schema (draft 2020-12), as checked in under docs/events/."""
    return {
        model.__name__: model.model_json_schema(schema_generator=_Draft202012, mode="serialization")
        for model in DETAIL_TYPES
    }


def schema_text(schema: dict[str, Any]) -> str:
    """A schema as the file under docs/events/ holds it."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
