"""The spans of a run's moments, as the code that records each moment tells them: the port,
the one that makes nothing (tracing off), and the choice between them at a cold start."""

import threading
from typing import TYPE_CHECKING, Protocol

from toolpipe.shared.messages import AssistantMessage, HandoffRecord, RunRecord, ToolResult
from toolpipe.shared.telemetry.settings import TracingSettings

if TYPE_CHECKING:
    from toolpipe.shared.deferred.models import Approval


class RunSpans(Protocol):
    """Each method is called once per moment, by the invocation whose write recorded it (as run
    events are: shared/runs/events.py), and never raises."""

    @property
    def enabled(self) -> bool: ...

    def model_called(
        self,
        run: RunRecord,
        reply: AssistantMessage,
        model: str,
        finish_reason: str | None,
        response_model: str | None,
    ) -> None:
        """A model call whose reply `reply` was just stored."""
        ...

    def tool_call_completed(self, run: RunRecord, result: ToolResult) -> None:
        """A call whose result was just stored (run by a worker, answered, refused, ended)."""
        ...

    def wait_ended(self, run: RunRecord, approval: "Approval") -> None:
        """A wait for a person (or the caller's program) just decided, answered or expired."""
        ...

    def run_handed_off(self, run: RunRecord, handoff: HandoffRecord, at: str) -> None: ...

    def run_ended(self, run: RunRecord) -> None:
        """The run's ending just recorded (`run` read after it)."""
        ...

    def flush(self) -> None:
        """Send what is held: called as each invocation ends (a frozen Lambda sends nothing)."""
        ...


class NoSpans:
    """Tracing off: nothing is made, and OpenTelemetry is never imported."""

    enabled = False

    def model_called(
        self,
        run: RunRecord,
        reply: AssistantMessage,
        model: str,
        finish_reason: str | None,
        response_model: str | None,
    ) -> None:
        pass

    def tool_call_completed(self, run: RunRecord, result: ToolResult) -> None:
        pass

    def wait_ended(self, run: RunRecord, approval: "Approval") -> None:
        pass

    def run_handed_off(self, run: RunRecord, handoff: HandoffRecord, at: str) -> None:
        pass

    def run_ended(self, run: RunRecord) -> None:
        pass

    def flush(self) -> None:
        pass


NO_SPANS = NoSpans()
# By settings: the local runtime starts again in the same process, maybe with another endpoint.
_made: dict[TracingSettings, RunSpans] = {}
_lock = threading.Lock()


def run_spans(settings: TracingSettings | None = None) -> RunSpans:
    """The spans of this process: exported over OTLP when tracing is on (`TracingSettings`),
    else `NO_SPANS`. One exporter per process, however many services ask."""
    settings = settings or TracingSettings.from_env()
    if not settings.enabled:
        return NO_SPANS
    with _lock:
        if settings not in _made:
            from toolpipe.shared.telemetry.otel import OtelSpans

            _made[settings] = OtelSpans(settings)
        return _made[settings]


def flush_spans() -> None:
    """Send the spans this process holds, if it made any."""
    for spans in list(_made.values()):
        spans.flush()
