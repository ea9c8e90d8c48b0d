"""Run event details: their checked-in schemas, and what each detail may carry."""

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from toolpipe.shared.errors import ErrorKind
from toolpipe.shared.messages import ParentCall, RunRecord, RunStatus, ToolResult, Usage
from toolpipe.shared.runs.events import (
    PREVIEW_CHARS,
    RunCompleted,
    RunFailed,
    RunStarted,
    ToolCallCompleted,
    run_ended,
    run_started,
    schema_text,
    schemas,
    tool_call_completed,
)

DOCS = Path(__file__).resolve().parents[4] / "docs" / "events"
RUN = RunRecord(run_id="r1", agent="tester", status=RunStatus.RUNNING, caller="arn:aws:iam::1:user/ana")


def test_checked_in_schemas_are_the_generated_ones() -> None:
    """Regenerate with `make event-schemas` when a model changes."""
    generated = schemas()
    # RunRequested.json is the detail toolpipe consumes (tests/unit/shared/triggers/test_trigger_events.py).
    assert sorted(generated) == sorted(p.stem for p in DOCS.glob("*.json") if p.stem != "RunRequested")
    for name, schema in generated.items():
        assert (DOCS / f"{name}.json").read_text() == schema_text(schema), f"docs/events/{name}.json is stale"


def test_schemas_are_draft_2020_12_and_accept_the_details() -> None:
    child = RUN.model_copy(
        update={
            "run_id": "c1",
            "root_run_id": "r1",
            "depth": 1,
            "parent": ParentCall(run_id="r1", call_id="c", seq=3, turn=1, tool="helper"),
        }
    )
    result = ToolResult(
        seq=3,
        turn=1,
        call_id="c",
        tool="t",
        content="x" * 10_000,
        status="error",
        error_type=ErrorKind.IN_DOUBT,
    )
    ended = RUN.model_copy(
        update={"status": RunStatus.SUCCEEDED, "output": "ok", "usage": Usage(model_calls=1)}
    )
    for detail in (run_started(child), tool_call_completed(RUN, result), run_ended(ended)):
        schema = schemas()[type(detail).__name__]
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        Draft202012Validator.check_schema(schema)
        Draft202012Validator(schema).validate(json.loads(detail.model_dump_json()))


def test_a_detail_carries_previews_never_whole_contents() -> None:
    result = ToolResult(
        seq=3, turn=1, call_id="c", tool="t", content="x" * 10_000, status="ok", full_result_chars=250_000
    )
    detail = tool_call_completed(RUN, result)
    assert isinstance(detail, ToolCallCompleted)
    assert len(detail.result_preview) == PREVIEW_CHARS and detail.result_preview.endswith("…")
    assert detail.result_chars == 250_000

    failed = run_ended(RUN.model_copy(update={"status": RunStatus.FAILED, "error": "e" * 4000}))
    assert isinstance(failed, RunFailed) and len(failed.error_preview or "") == PREVIEW_CHARS


def test_the_ending_decides_the_detail_type() -> None:
    limit = run_ended(
        RUN.model_copy(update={"status": RunStatus.LIMIT, "error": "stopped after 4 model turns"})
    )
    assert isinstance(limit, RunCompleted) and limit.status == "limit" and limit.output_chars is None
    long_answer = RUN.model_copy(
        update={"status": RunStatus.SUCCEEDED, "output": "a" * 4000, "output_chars": 9000}
    )
    answered = run_ended(long_answer)
    assert isinstance(answered, RunCompleted) and answered.output_chars == 9000
    assert isinstance(run_started(RUN), RunStarted)
    with pytest.raises(ValueError, match="has not ended"):
        run_ended(RUN)
