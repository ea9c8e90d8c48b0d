"""A run's trace context: begun, joined from a caller's `traceparent`, passed to child runs."""

import pytest

from toolpipe.shared.messages import ParentCall, RunRecord, RunStatus, TraceContext
from toolpipe.shared.telemetry import child_trace, new_trace, span_id, trace_of

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


def _run(run_id: str = "r1", **fields: object) -> RunRecord:
    return RunRecord(run_id=run_id, agent="a", status=RunStatus.RUNNING, **fields)  # type: ignore[arg-type]


def test_a_valid_traceparent_makes_the_run_a_child_of_the_callers_span() -> None:
    trace = new_trace(f"00-{CALLER_TRACE}-{CALLER_SPAN}-01")
    assert trace == TraceContext(trace_id=CALLER_TRACE, parent_span_id=CALLER_SPAN, sampled=True)
    assert new_trace(f"00-{CALLER_TRACE}-{CALLER_SPAN}-00").sampled is False
    # Upper case and surrounding spaces are read as a proxy may pass them; a later version's
    # extra fields are ignored, as the spec asks.
    assert new_trace(f" 00-{CALLER_TRACE.upper()}-{CALLER_SPAN}-01 ").trace_id == CALLER_TRACE
    assert new_trace(f"01-{CALLER_TRACE}-{CALLER_SPAN}-01-more").trace_id == CALLER_TRACE


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        f"ff-{CALLER_TRACE}-{CALLER_SPAN}-01",  # version ff is invalid
        f"00-{'0' * 32}-{CALLER_SPAN}-01",
        f"00-{CALLER_TRACE}-{'0' * 16}-01",
        f"00-{CALLER_TRACE}-{CALLER_SPAN}-01-extra",  # version 00 has exactly four fields
        f"00-{CALLER_TRACE[:-1]}-{CALLER_SPAN}-01",
        f"00-{CALLER_TRACE}-{CALLER_SPAN}-zz",
        "00-" + "a" * 10_000,
    ],
)
def test_a_bad_traceparent_begins_a_trace_of_the_runs_own(header: str) -> None:
    trace = new_trace(header)
    assert trace.parent_span_id is None and trace.sampled
    assert len(trace.trace_id) == 32 and trace.trace_id != CALLER_TRACE
    assert new_trace(header).trace_id != trace.trace_id  # random, not derived from the header


def test_span_ids_are_derived_from_the_run_and_what_they_are_about() -> None:
    assert span_id("r1", "call", 3) == span_id("r1", "call", 3)
    ids = {
        span_id("r1", "run"),
        span_id("r1", "call", 3),
        span_id("r1", "model", 3),
        span_id("r2", "call", 3),
    }
    assert len(ids) == 4
    assert all(len(i) == 16 and int(i, 16) for i in ids)


def test_a_child_run_joins_its_parents_trace_under_the_call_it_answers() -> None:
    parent = _run(trace=TraceContext(trace_id=CALLER_TRACE, sampled=False))
    trace = child_trace(parent, 4)
    assert trace == TraceContext(
        trace_id=CALLER_TRACE, parent_span_id=span_id("r1", "call", 4), sampled=False
    )


def test_runs_recorded_before_traces_share_one_derived_from_their_root() -> None:
    root = _run("root")
    child = _run(
        "child",
        root_run_id="root",
        parent=ParentCall(run_id="root", call_id="c", seq=3, turn=1, tool="helper"),
    )
    assert trace_of(root).trace_id == trace_of(child).trace_id
    assert trace_of(root).trace_id != trace_of(_run("other")).trace_id
