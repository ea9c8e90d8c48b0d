"""One OpenTelemetry trace per run: the trace context a run keeps (`ids`), when tracing is on
(`settings`), the spans a run's moments make (`spans`) and their OpenTelemetry export (`otel`,
imported only when tracing is on, so a function that does not trace pays nothing for it).

Spans are made when what they describe has been recorded, from what the run stores (its trace
context, the times its items and approvals record) and with ids derived from the run: so the
spans of one run, made by many invocations in several executions, before and after a pause of
days or a restart, are one trace, and a retried step or a redelivered call makes no second span.
"""

from toolpipe.shared.telemetry.ids import child_trace, new_trace, span_id, trace_of
from toolpipe.shared.telemetry.settings import TracingSettings
from toolpipe.shared.telemetry.spans import NO_SPANS, RunSpans, flush_spans, run_spans

__all__ = [
    "NO_SPANS",
    "RunSpans",
    "TracingSettings",
    "child_trace",
    "flush_spans",
    "new_trace",
    "run_spans",
    "span_id",
    "trace_of",
]
