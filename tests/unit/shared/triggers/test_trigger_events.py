"""The RunRequested detail: its checked-in JSON Schema, and the samples it must accept."""

import json
import re
from pathlib import Path

import jsonschema
import pytest

from toolpipe.shared.errors import ConfigurationError
from toolpipe.shared.settings import TriggerSettings
from toolpipe.shared.triggers.events import (
    RunRequested,
    RunRequestedDetail,
    TriggerEventError,
    parse_trigger_event,
    run_requested_schema,
)

ROOT = Path(__file__).resolve().parents[4]
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


def test_the_eventbridge_object_created_shape_names_the_same_write() -> None:
    from toolpipe.shared.triggers import S3ObjectCreated, parse_trigger_event

    event = {
        "version": "0",
        "id": "17793124-05d4-b198-2fde-7ededc63b103",
        "detail-type": "Object Created",
        "source": "aws.s3",
        "account": "123456789012",
        "detail": {
            "bucket": {"name": "inputs"},
            "object": {
                "key": "inbox/a b+c.txt",
                "size": 5,
                "etag": "e",
                "version-id": "v1",
                "sequencer": "00A",
            },
            "reason": "PutObject",
        },
    }
    assert parse_trigger_event(event) == [
        S3ObjectCreated(
            bucket="inputs", key="inbox/a b+c.txt", size=5, etag="e", version_id="v1", sequencer="00A"
        )
    ]
    # An S3 notification gives the key URL-encoded: the same object reads the same.
    notification = {
        "Records": [
            {
                "eventSource": "aws:s3",
                "eventName": "ObjectCreated:Put",
                "s3": {
                    "bucket": {"name": "inputs"},
                    "object": {
                        "key": "inbox/a+b%2Bc.txt",
                        "size": 5,
                        "eTag": "e",
                        "versionId": "v1",
                        "sequencer": "00A",
                    },
                },
            }
        ]
    }
    [created] = parse_trigger_event(notification)  # type: ignore[misc]
    assert created.key == "inbox/a b+c.txt" and created.identity == "s3://inputs/inbox/a b+c.txt#version=v1"


class _Objects:
    """An S3 stand-in for the answer writer's two calls: heads and conditional puts."""

    def __init__(self) -> None:
        from toolpipe.shared.runs.triggers import ObjectHead

        self.Head = ObjectHead
        self.stored: dict[str, tuple[str, dict[str, str], str]] = {}
        self.puts = 0
        self.before_put: list[tuple[str, str, dict[str, str]]] = []  # writes that land first

    def head(self, bucket: str, key: str, version_id: str | None = None) -> object:
        if key not in self.stored:
            return None
        _, metadata, etag = self.stored[key]
        return self.Head(size=0, content_type=None, etag=etag, version_id=None, metadata=metadata)

    def put_if(self, bucket: str, key: str, body: str, metadata: dict[str, str], etag: str | None) -> bool:
        for landed in self.before_put:
            self.stored[landed[0]] = (landed[1], landed[2], f"etag-{len(self.stored)}-x")
        self.before_put = []
        current = self.stored.get(key)
        if (current is None) != (etag is None) or (current is not None and current[2] != etag):
            return False
        self.puts += 1
        self.stored[key] = (body, metadata, f"etag-{self.puts}")
        return True


def _ended(run_id: str, status: str = "succeeded") -> object:
    from toolpipe.shared.messages import InputObject, RunRecord, RunStatus

    source = InputObject(bucket="b", key="inbox/q.txt", size=3, answer_key="answers/q.txt")
    return RunRecord(run_id=run_id, agent="a", status=RunStatus(status), input_object=source, error="boom")


def test_an_answer_is_written_once_per_run_and_a_racing_ending_of_the_same_run_wins_cleanly() -> None:
    from toolpipe.shared.runs.triggers import AnswerWriter

    objects = _Objects()
    writer = AnswerWriter(objects)  # type: ignore[arg-type]
    assert writer.write(_ended("r1"), lambda: "four") is True  # type: ignore[arg-type]
    assert writer.write(_ended("r1"), lambda: "four") is False  # a retried ending: already written
    assert objects.puts == 1 and objects.stored["answers/q.txt.answer.md"][0] == "four"
    # Another ending of r2 lands between this one's head and put: this one sees it and stops.
    objects.before_put = [("answers/q.txt.answer.md", "four", {"toolpipe-run-id": "r2"})]
    assert writer.write(_ended("r2"), lambda: "four") is False  # type: ignore[arg-type]
    assert objects.puts == 1
    # A failed run writes its error beside it, never as an answer.
    assert writer.write(_ended("r3", "failed"), lambda: None) is True  # type: ignore[arg-type]
    assert objects.stored["answers/q.txt.error.md"][0] == "The run r3 ended failed: boom\n"


def test_an_answer_found_from_another_run_is_replaced_only_as_it_was_seen() -> None:
    from toolpipe.shared.runs.triggers import AnswerWriter

    objects = _Objects()
    writer = AnswerWriter(objects)  # type: ignore[arg-type]
    assert writer.write(_ended("r1"), lambda: "four") is True  # type: ignore[arg-type]
    # A later run of the key (another version): its create fails, it reads r1's, replaces it.
    assert writer.write(_ended("r4"), lambda: "still four") is True  # type: ignore[arg-type]
    assert objects.stored["answers/q.txt.answer.md"][:2] == ("still four", _metadata("r4"))
    assert objects.puts == 2
    assert writer.write(_ended("r4"), lambda: "still four") is False  # its retry: written already
    assert objects.puts == 2


def _metadata(run_id: str) -> dict[str, str]:
    return {"toolpipe-run-id": run_id, "toolpipe-status": "succeeded"}


@pytest.mark.parametrize(
    ("given", "sources"),
    [
        (None, ("toolpipe.requests",)),
        (
            "com.example.billing, com.example.crm,com.example.billing",
            ("com.example.billing", "com.example.crm"),
        ),
    ],
)
def test_the_stack_names_the_sources_of_run_requests(given: str | None, sources: tuple[str, ...]) -> None:
    env = {} if given is None else {"TOOLPIPE_TRIGGER_SOURCES": given}
    assert TriggerSettings.from_env(env).sources == sources


@pytest.mark.parametrize("given", ["aws.s3", "has space", ",", "x" * 257])
def test_a_source_eventbridge_would_refuse_is_a_configuration_error(given: str) -> None:
    with pytest.raises(ConfigurationError, match="TOOLPIPE_TRIGGER_SOURCES"):
        TriggerSettings.from_env({"TOOLPIPE_TRIGGER_SOURCES": given})


def test_run_requested_is_taken_only_from_the_sources_named() -> None:
    event = json.loads((ROOT / "events" / "eventbridge_run_requested.json").read_text())
    assert isinstance(parse_trigger_event(event), RunRequested)
    with pytest.raises(TriggerEventError, match=re.escape("from source 'toolpipe.requests' is not accepted")):
        parse_trigger_event(event, ("com.example.billing",))
    assert isinstance(
        parse_trigger_event({**event, "source": "com.example.billing"}, ("com.example.billing",)),
        RunRequested,
    )
