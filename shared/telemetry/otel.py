"""Run spans exported with the OpenTelemetry SDK over OTLP/HTTP, named and attributed by the
GenAI semantic conventions (https://opentelemetry.io/docs/specs/semconv/gen-ai/), where they
have a name for it, and under `toolpipe.*` where they do not (waits for a person, handoffs).

Each span is made whole when its moment is recorded: started and ended at the times the run
stored, with the id `ids.span_id` gives it, under the parent the run's trace context names.
Spans hold ids, names, statuses, counts and times; a prompt, reply, argument or result only
with content capture on, and then cut at `CONTENT_CHARS`.
"""

import contextvars
import json
import logging
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    set_span_in_context,
)
from opentelemetry.util.types import AttributeValue

from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.messages import (
    AssistantMessage,
    HandoffRecord,
    RunRecord,
    RunStatus,
    ToolResult,
    utc_now,
)
from toolpipe.shared.telemetry.ids import span_id, trace_of
from toolpipe.shared.telemetry.settings import TracingSettings

if TYPE_CHECKING:
    from toolpipe.shared.deferred.models import Approval

logger = logging.getLogger(__name__)

# Captured content is cut here: an attribute the size of a whole result would be dropped by
# most backends, and would make each export as large as the history.
CONTENT_CHARS = 4_096
# Any other text in a span (a name, a tool's or agent's name, who decided) is cut here.
LABEL_CHARS = 256
_CONTENT_KEYS = frozenset({"gen_ai.output.messages", "gen_ai.tool.call.result"})
# The service name when `OTEL_SERVICE_NAME` (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`)
# does not give one.
DEFAULT_SERVICE = "toolpipe"
# What the OpenAI-compatible client speaks, as the conventions name providers.
PROVIDER = "openai"
# How long an invocation's end waits for its spans to be sent, and how long the exporter tries
# (its retries included) unless `OTEL_EXPORTER_OTLP_TIMEOUT` says otherwise: a collector beside
# the function answers in milliseconds, and one that is down must not hold each invocation for
# the exporter's default 10 s.
FLUSH_MILLIS = 1_000
EXPORT_SECONDS = 1.0
_TIMEOUTS = ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")

# The ids of the span being started, set around `start_span` (a context variable: the local
# runtime runs invocations on many threads).
_next_ids: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "toolpipe_span_ids", default=None
)


class _RunIds(IdGenerator):
    """The SDK asks its id generator for each span's id (and a root span's trace id): these come
    from the run, where one is set, so a span's id does not depend on which invocation made it."""

    _random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        ids = _next_ids.get()
        return ids[1] if ids is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        ids = _next_ids.get()
        return ids[0] if ids is not None else self._random.generate_trace_id()


def provider(endpoint: str) -> TracerProvider:
    """A tracer provider of toolpipe's own (a tool's or a user's global provider is left alone),
    exporting in batches over OTLP/HTTP to `endpoint` (headers and the like: the environment's)."""
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE}))
    made = TracerProvider(resource=resource, id_generator=_RunIds())
    timeout = None if any(os.environ.get(name) for name in _TIMEOUTS) else EXPORT_SECONDS
    made.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=timeout)))
    return made


class OtelSpans:
    enabled = True

    def __init__(self, settings: TracingSettings) -> None:
        assert settings.endpoint is not None, "tracing is on only with an endpoint"
        self._provider = provider(settings.endpoint)
        self._tracer: Tracer = self._provider.get_tracer("toolpipe")
        self._content = settings.capture_content

    def model_called(
        self,
        run: RunRecord,
        reply: AssistantMessage,
        model: str,
        finish_reason: str | None,
        response_model: str | None,
    ) -> None:
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": PROVIDER,
            "gen_ai.request.model": model,
            "gen_ai.agent.name": reply.agent or run.current_agent,
            "gen_ai.conversation.id": run.run_id,
            "toolpipe.run_id": run.run_id,
            "toolpipe.turn": reply.turn,
            "toolpipe.tool_calls": len(reply.tool_calls),
        }
        if reply.usage is not None:
            attributes["gen_ai.usage.input_tokens"] = reply.usage.prompt_tokens
            attributes["gen_ai.usage.output_tokens"] = reply.usage.completion_tokens
        if finish_reason:
            attributes["gen_ai.response.finish_reasons"] = [finish_reason]
        if response_model:
            attributes["gen_ai.response.model"] = response_model
        if self._content:
            attributes["gen_ai.output.messages"] = _cut(
                json.dumps([_output_message(reply)], ensure_ascii=False)
            )
        self._emit(
            run,
            ("model", reply.seq),
            ("run",),
            f"chat {model}",
            SpanKind.CLIENT,
            reply.started_at or reply.created_at,
            reply.created_at,
            attributes,
        )

    def tool_call_completed(self, run: RunRecord, result: ToolResult) -> None:
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": result.tool,
            "gen_ai.tool.call.id": result.call_id,
            "gen_ai.tool.type": "function",
            "toolpipe.run_id": run.run_id,
            "toolpipe.turn": result.turn,
            "toolpipe.call.slot": result.seq,
            "toolpipe.call.status": result.status,
            "toolpipe.call.attempts": max(1, result.attempts),
            "toolpipe.call.in_doubt": result.error_type is ErrorKind.IN_DOUBT,
        }
        if result.duration_ms is not None:
            attributes["toolpipe.call.duration_ms"] = result.duration_ms
        if self._content:
            attributes["gen_ai.tool.call.result"] = _cut(result.content)
        self._emit(
            run,
            ("call", result.seq),
            ("run",),
            f"execute_tool {result.tool}",
            SpanKind.INTERNAL,
            result.started_at or _before(result.created_at, result.duration_ms),
            result.created_at,
            attributes,
            error=result.error_type.value if result.status == "error" and result.error_type else None,
        )

    def wait_ended(self, run: RunRecord, approval: "Approval") -> None:
        end = approval.decided_at or utc_now()
        attributes: dict[str, AttributeValue] = {
            "gen_ai.tool.name": approval.tool,
            "gen_ai.tool.call.id": approval.call_id,
            "toolpipe.run_id": run.run_id,
            "toolpipe.call.slot": approval.seq,
            "toolpipe.wait.kind": approval.kind.value,
            "toolpipe.wait.outcome": approval.status.value,
            "toolpipe.wait.seconds": round((_ns(end) - _ns(approval.created_at)) / 1e9, 3),
        }
        if approval.decided_by:
            attributes["toolpipe.wait.decided_by"] = approval.decided_by
        self._emit(
            run,
            ("wait", approval.approval_id),
            ("run",),
            f"await {approval.kind.value} {approval.tool}",
            SpanKind.INTERNAL,
            approval.created_at,
            end,
            attributes,
        )

    def run_handed_off(self, run: RunRecord, handoff: HandoffRecord, at: str) -> None:
        attributes: dict[str, AttributeValue] = {
            "gen_ai.agent.name": handoff.to_agent,
            "toolpipe.run_id": run.run_id,
            "toolpipe.turn": handoff.turn,
            "toolpipe.handoff.kind": handoff.kind,
            "toolpipe.handoff.from_agent": handoff.from_agent,
            "toolpipe.handoff.to_agent": handoff.to_agent,
        }
        if handoff.via:
            attributes["gen_ai.tool.name"] = handoff.via
        self._emit(
            run,
            ("handoff", handoff.turn, handoff.to_agent),
            ("run",),
            f"handoff {handoff.from_agent} -> {handoff.to_agent}",
            SpanKind.INTERNAL,
            at,
            at,
            attributes,
        )

    def run_ended(self, run: RunRecord) -> None:
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": run.agent,
            "gen_ai.conversation.id": run.run_id,
            "gen_ai.usage.input_tokens": run.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": run.usage.completion_tokens,
            "toolpipe.run_id": run.run_id,
            "toolpipe.run.status": run.status.value,
            "toolpipe.run.turns": run.turn,
            "toolpipe.run.depth": run.depth,
            "toolpipe.run.handoffs": len(run.handoffs),
        }
        if run.active_agent:
            attributes["toolpipe.run.active_agent"] = run.active_agent
        if run.parent is not None:
            attributes["toolpipe.run.parent_run_id"] = run.parent.run_id
        failed = run.status in (RunStatus.FAILED, RunStatus.LIMIT)
        trace = trace_of(run)
        self._emit(
            run,
            ("run",),
            trace.parent_span_id,
            f"invoke_agent {run.agent}",
            SpanKind.INTERNAL,
            run.created_at,
            run.updated_at,
            attributes,
            error=run.status.value if failed else None,
            description=_cut(run.error) if failed and self._content and run.error else None,
        )

    def flush(self) -> None:
        try:
            self._provider.force_flush(FLUSH_MILLIS)
        except Exception:
            # Tracing is an observer: a collector that is down must not fail the invocation.
            logger.warning("spans not sent", exc_info=True)

    def _emit(
        self,
        run: RunRecord,
        about: tuple[object, ...],
        parent: tuple[object, ...] | str | None,
        name: str,
        kind: SpanKind,
        start: str,
        end: str,
        attributes: Mapping[str, AttributeValue],
        *,
        error: str | None = None,
        description: str | None = None,
    ) -> None:
        """Make and end one span. `parent`: what the parent span is about (in this run), a span
        id of another (the caller's, a parent run's call), or None for the trace's first span."""
        try:
            trace = trace_of(run)
            if not trace.sampled:
                return
            trace_id = int(trace.trace_id, 16)
            context = Context()  # never the current span of whatever code runs this
            if parent is not None:
                parent_id = parent if isinstance(parent, str) else span_id(run.run_id, *parent)
                parent_context = SpanContext(
                    trace_id, int(parent_id, 16), is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
                )
                context = set_span_in_context(NonRecordingSpan(parent_context), context)
            token = _next_ids.set((trace_id, int(span_id(run.run_id, *about), 16)))
            try:
                span = self._tracer.start_span(
                    _cut(name, LABEL_CHARS),
                    context=context,
                    kind=kind,
                    attributes={k: _bounded(k, v) for k, v in attributes.items()},
                    start_time=_ns(start),
                )
            finally:
                _next_ids.reset(token)
            if error is not None:
                span.set_attribute("error.type", error)
                span.set_status(Status(StatusCode.ERROR, description))
            span.end(end_time=max(_ns(end), _ns(start)))
        except Exception:
            # Tracing is an observer: a span that cannot be made must not fail the run.
            logger.warning("span not made: %s", name, exc_info=True)


def _ns(iso: str) -> int:
    moment = datetime.fromisoformat(iso)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1_000_000) * 1_000


def _before(iso: str, duration_ms: int | None) -> str:
    if not duration_ms:
        return iso
    return datetime.fromtimestamp(_ns(iso) / 1e9 - duration_ms / 1000, UTC).isoformat(timespec="milliseconds")


def _cut(text: str, limit: int = CONTENT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _bounded(key: str, value: AttributeValue) -> AttributeValue:
    """Names come from the model and from callers (a tool name, an agent, who decided): cut, so
    a hostile one cannot make every span of the run the size of a payload."""
    if isinstance(value, str) and key not in _CONTENT_KEYS:
        return _cut(value, LABEL_CHARS)
    return value


def _output_message(reply: AssistantMessage) -> dict[str, Any]:
    """The reply as the conventions' `gen_ai.output.messages` item."""
    parts: list[dict[str, Any]] = []
    if reply.content:
        parts.append({"type": "text", "content": reply.content})
    parts.extend(
        {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        for call in reply.tool_calls
    )
    return {"role": "assistant", "parts": parts}
