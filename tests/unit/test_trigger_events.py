"""The RunRequested detail: its checked-in JSON Schema, and the samples it must accept."""

import json
from pathlib import Path

import jsonschema
import pytest

from shared.triggers.events import RunRequestedDetail, run_requested_schema

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "docs" / "events" / "RunRequested.json"


def test_the_checked_in_schema_is_the_models() -> None:
    assert SCHEMA.read_text() == run_requested_schema(), (
        "regenerate it: python -c 'from shared.triggers.events import run_requested_schema as s; "
        'open("docs/events/RunRequested.json", "w").write(s())\''
    )


@pytest.mark.parametrize("sample", ["eventbridge_run_requested.json", "schedule_run_requested.json"])
def test_the_samples_details_satisfy_the_schema_and_the_model(sample: str) -> None:
    detail = json.loads((ROOT / "events" / sample).read_text())["detail"]
    jsonschema.validate(detail, json.loads(SCHEMA.read_text()))
    RunRequestedDetail.model_validate(detail).start_request()


def test_the_schema_refuses_what_the_model_refuses() -> None:
    schema = json.loads(SCHEMA.read_text())
    for bad in (
        {"agent": "assistant"},
        {"agent": "a", "input": "x", "prompt": "x"},
        {"agent": "a b", "input": "x"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
