"""A run's trace context and the ids of its spans.

A root run begins a trace (or joins its caller's, from a W3C `traceparent`); a child run joins
its parent's, under the span of the call it answers. Span ids are derived from the run's id and
what the span is about (the reply's or the call's slot, the approval's id), so any invocation
can name a span's parent without having seen it made, and a span made twice has the same id.
"""

import hashlib
import re
import secrets

from toolpipe.shared.messages import RunRecord, TraceContext

# https://www.w3.org/TR/trace-context/#traceparent-header: version 00 (an unknown version is
# read the same way, as the spec asks), all-zero ids invalid.
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


def span_id(run_id: str, *about: object) -> str:
    """The id (16 hex digits) of the span of `run_id` that `about` names: ("run",),
    ("model", reply seq), ("call", slot), ("wait", approval id), ("handoff", turn, agent)."""
    text = "\x1f".join([run_id, *(str(part) for part in about)])
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return _ZERO_SPAN[:-1] + "1" if digest == _ZERO_SPAN else digest


def new_trace(traceparent: str | None = None) -> TraceContext:
    """A root run's trace: its caller's, when the caller sent a valid `traceparent` (the run's
    span is then a child of the caller's), else a new one."""
    parent = _parse(traceparent) if traceparent else None
    return parent or TraceContext(trace_id=secrets.token_hex(16))


def child_trace(parent: RunRecord, slot: int) -> TraceContext:
    """A child run's trace: its parent's, under the span of the call (`slot`) it answers."""
    trace = trace_of(parent)
    return TraceContext(
        trace_id=trace.trace_id, parent_span_id=span_id(parent.run_id, "call", slot), sampled=trace.sampled
    )


def trace_of(run: RunRecord) -> TraceContext:
    """The run's trace context; for a run recorded before runs kept one, a trace id derived
    from its root run's id (so a whole tree still shares one)."""
    if run.trace is not None:
        return run.trace
    root = run.root_run_id or run.run_id
    return TraceContext(trace_id=hashlib.sha256(f"trace\x1f{root}".encode()).hexdigest()[:32])


def _parse(header: str) -> TraceContext | None:
    match = _TRACEPARENT.match(header.strip().lower()[:512])
    if match is None:
        return None
    version, trace_id, parent_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or trace_id == _ZERO_TRACE or parent_id == _ZERO_SPAN:
        return None
    return TraceContext(trace_id=trace_id, parent_span_id=parent_id, sampled=bool(int(flags, 16) & 1))
