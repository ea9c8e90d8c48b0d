"""The triggers function on its `events/` samples and on hostile variants, on moto and the
scripted model: one run per object write or event id, a clear line and nothing written for
bad input, and a file that reaches the agent only through `read_input`."""

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Pipeline, Reply, _pipeline, call
from toolpipe.infra.local import iam, triggers
from toolpipe.infra.local.lambdas import LocalContext, call_handler
from toolpipe.infra.local.runtime import LOCAL_CALLER, TABLE
from toolpipe.infra.local.scripted_model import DemoResponder, HttpError
from toolpipe.shared.agents.read_input import MAX_READ_BYTES, read_input
from toolpipe.shared.messages import InputObject
from toolpipe.shared.tools import ToolContext
from toolpipe.shared.tools.errors import InvalidArgumentsError, ToolExecutionError

EVENTS = Path(__file__).resolve().parents[2] / "events"
QUESTION = (EVENTS / "s3_put.txt").read_bytes()


@pytest.fixture
def pipeline() -> Iterator[Pipeline]:
    # The tester agent answers files, so the scripted model drives what it reads.
    yield from _pipeline({"TOOLPIPE_TRIGGER_AGENT": "tester", "TOOLPIPE_TRIGGER_MAX_OBJECT_BYTES": "1000"})


@pytest.fixture(scope="module")
def quiet_pipeline() -> Iterator[Pipeline]:
    """One runtime for the tests that start nothing: each checks that nothing was written."""
    yield from _pipeline({"TOOLPIPE_TRIGGER_MAX_OBJECT_BYTES": "1000"})


def sample(name: str) -> dict[str, Any]:
    return dict(json.loads((EVENTS / name).read_text()))


def deliver(event: Any) -> dict[str, Any]:
    result = call_handler(
        triggers.TRIGGERS_HANDLER, event, LocalContext(function_name="triggers", timeout_seconds=60)
    )
    return dict(result)


def runs(pipeline: Pipeline) -> list[dict[str, Any]]:
    items = pipeline.runtime.dynamodb.scan(TableName=TABLE)["Items"]
    return [i for i in items if i["sk"]["S"] == "META"]


def outputs(pipeline: Pipeline) -> dict[str, dict[str, Any]]:
    s3 = pipeline.runtime.s3
    listed = s3.list_objects_v2(Bucket=triggers.TRIGGER_BUCKET, Prefix=triggers.OUTPUT_PREFIX)
    return {
        o["Key"]: s3.head_object(Bucket=triggers.TRIGGER_BUCKET, Key=o["Key"])
        for o in listed.get("Contents", [])
    }


def test_the_s3_sample_delivered_twice_starts_one_run_that_reads_its_file_and_answers_once(
    pipeline: Pipeline,
) -> None:
    triggers.put_quietly(pipeline.runtime.s3, "inbox/question.txt", QUESTION)
    pipeline.script(
        Reply(tool_calls=[call("read_input", offset=0, length=8)]),
        Reply(tool_calls=[call("read_input", offset=8)]),
        Reply(content="The square root of 16 is 4."),
    )
    first = deliver(sample("s3_put.json"))["results"][0]
    again = deliver(sample("s3_put.json"))["results"][0]
    assert first["outcome"] == "started" and again == {**first, "outcome": "replayed"}
    assert len(runs(pipeline)) == 1
    pipeline.callers[first["run_id"]] = LOCAL_CALLER
    run = pipeline.finish(first["run_id"])
    assert run["run"]["status"] == "succeeded"
    prompt = run["messages"][0]["content"]
    # The agent is told where the file is, never what it holds.
    assert "s3://toolpipe-local-inputs/inbox/question.txt" in prompt and "square root" not in prompt
    results = [m["content"] for m in run["messages"] if m["kind"] == "tool_result"]
    assert results == [
        "[bytes 0-7 of 30; next offset 8]\nWhat is ",
        "[bytes 8-29 of 30; end of file]\nthe square root of 16?",
    ]
    answers = outputs(pipeline)
    assert list(answers) == ["answers/question.txt.answer.md"]
    body = pipeline.runtime.s3.get_object(
        Bucket=triggers.TRIGGER_BUCKET, Key="answers/question.txt.answer.md"
    )
    assert body["Body"].read() == b"The square root of 16 is 4."
    assert body["Metadata"]["toolpipe-run-id"] == first["run_id"]
    # Delivered again after the end: no run, and the answer is not written a second time.
    assert deliver(sample("s3_put.json"))["results"][0]["outcome"] == "replayed"
    assert (
        outputs(pipeline)["answers/question.txt.answer.md"]["ETag"]
        == answers["answers/question.txt.answer.md"]["ETag"]
    )
    assert len(runs(pipeline)) == 1


def test_answers_are_written_replaced_and_kept_by_a_role_that_may_not_list_the_bucket(
    pipeline: Pipeline,
) -> None:
    """S3 answers a HEAD of a missing key with 403 to the orchestrator (no s3:ListBucket), as on
    AWS: the answer is created with `If-None-Match`, and a later run of the same key, finding
    one, replaces it with `If-Match`."""
    runtime = pipeline.runtime
    listing = iam.Request("s3:ListBucket", f"arn:aws:s3:::{triggers.TRIGGER_BUCKET}")
    assert not runtime.functions["orchestrator"].policy.allows(listing)
    triggers.put_quietly(runtime.s3, "inbox/question.txt", QUESTION)
    ids = []
    for sequencer, answer in (("0A1B2C3D4E5F678901", "four"), ("0A1B2C3D4E5F678902", "still four")):
        event = sample("s3_put.json")
        event["Records"][0]["s3"]["object"]["sequencer"] = sequencer  # another write of the key
        pipeline.script(Reply(content=answer))
        run_id = deliver(event)["results"][0]["run_id"]
        pipeline.callers[run_id] = LOCAL_CALLER
        assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
        written = runtime.s3.get_object(Bucket=triggers.TRIGGER_BUCKET, Key="answers/question.txt.answer.md")
        assert written["Body"].read().decode() == answer
        assert written["Metadata"]["toolpipe-run-id"] == run_id
        ids.append(run_id)
    assert ids[0] != ids[1] and list(outputs(pipeline)) == ["answers/question.txt.answer.md"]


def test_an_input_deleted_before_its_notification_is_handled_is_skipped(pipeline: Pipeline) -> None:
    """The triggers function may list the bucket, so S3 tells it (404) that the input is gone,
    where a role that may not would be answered 403 and the event retried to the DLQ."""
    triggers.put_quietly(pipeline.runtime.s3, "inbox/question.txt", QUESTION)
    pipeline.runtime.s3.delete_object(Bucket=triggers.TRIGGER_BUCKET, Key="inbox/question.txt")
    [skipped] = deliver(sample("s3_put.json"))["results"]
    assert skipped == {
        "outcome": "skipped",
        "reason": "s3://toolpipe-local-inputs/inbox/question.txt: deleted before its run could start",
    }
    assert runs(pipeline) == []


def test_a_failed_triggered_run_writes_its_error_under_the_output_prefix(pipeline: Pipeline) -> None:
    triggers.put_quietly(pipeline.runtime.s3, "inbox/question.txt", QUESTION)
    pipeline.script(HttpError(400, {"error": {"message": "no", "type": "invalid_request_error"}}))
    run_id = deliver(sample("s3_put.json"))["results"][0]["run_id"]
    pipeline.callers[run_id] = LOCAL_CALLER
    assert pipeline.finish(run_id)["run"]["status"] == "failed"
    assert list(outputs(pipeline)) == ["answers/question.txt.error.md"]


@pytest.mark.parametrize("name", ["eventbridge_run_requested.json", "schedule_run_requested.json"])
def test_each_run_requested_sample_delivered_twice_starts_one_run(pipeline: Pipeline, name: str) -> None:
    pipeline.model.responder = DemoResponder()
    first = deliver(sample(name))
    assert first["outcome"] == "started"
    assert deliver(sample(name)) == {**first, "outcome": "replayed"}
    assert len(runs(pipeline)) == 1
    # Owned by the configured principal (locally, the local user): readable through the API.
    pipeline.callers[first["run_id"]] = LOCAL_CALLER
    run = pipeline.finish(first["run_id"])["run"]
    assert run["status"] == "succeeded" and run["caller"] == LOCAL_CALLER
    assert run.get("metadata") == sample(name)["detail"].get("metadata")  # kept, as the API keeps it
    status, _ = pipeline.runtime.api("GET", f"/runs/{first['run_id']}", caller="arn:aws:iam::1:user/other")
    assert status == 404


def test_a_put_under_the_prefix_starts_one_run_per_write(pipeline: Pipeline) -> None:
    pipeline.model.responder = DemoResponder()
    s3 = pipeline.runtime.s3
    s3.put_object(Bucket=triggers.TRIGGER_BUCKET, Key="inbox/a.txt", Body=b"one")
    s3.put_object(Bucket=triggers.TRIGGER_BUCKET, Key="inbox/a.txt", Body=b"two")  # a new write: its own run
    assert len(runs(pipeline)) == 2


def test_a_senders_retried_run_request_starts_one_run_by_its_own_key(pipeline: Pipeline) -> None:
    # A sender that lost PutEvents' answer sends again: EventBridge gives the retry a new id.
    pipeline.model.responder = DemoResponder()
    event = sample("eventbridge_run_requested.json")
    event["detail"]["idempotency_key"] = "order-42"
    retry = {**copy.deepcopy(event), "id": "another-id-for-the-same-request"}
    first, again = deliver(event), deliver(retry)
    assert first["outcome"] == "started" and again == {**first, "outcome": "replayed"}
    assert len(runs(pipeline)) == 1


def test_a_multipart_upload_starts_one_run(pipeline: Pipeline) -> None:
    # moto notifies a completed multipart upload twice; both name the same write.
    pipeline.model.responder = DemoResponder()
    s3 = pipeline.runtime.s3
    upload = s3.create_multipart_upload(Bucket=triggers.TRIGGER_BUCKET, Key="inbox/multi.txt")
    part = s3.upload_part(
        Bucket=triggers.TRIGGER_BUCKET,
        Key="inbox/multi.txt",
        UploadId=upload["UploadId"],
        PartNumber=1,
        Body=b"What is 2+3?",
    )
    s3.complete_multipart_upload(
        Bucket=triggers.TRIGGER_BUCKET,
        Key="inbox/multi.txt",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    assert len(runs(pipeline)) == 1


def test_the_trigger_bucket_survives_a_restart_and_a_restored_file_starts_no_run(tmp_path: Path) -> None:
    for pipeline in _pipeline(state_dir=tmp_path):
        pipeline.runtime.s3.put_object(Bucket=triggers.TRIGGER_BUCKET, Key="inbox/q.txt", Body=b"hello")
        [run] = runs(pipeline)
        pipeline.runtime.wait_for_execution(run["run_id"]["S"])
    for pipeline in _pipeline(state_dir=tmp_path):
        listed = pipeline.runtime.s3.list_objects_v2(Bucket=triggers.TRIGGER_BUCKET)["Contents"]
        assert sorted(o["Key"] for o in listed) == ["answers/q.txt.answer.md", "inbox/q.txt"]
        assert [r["run_id"] for r in runs(pipeline)] == [run["run_id"]]


def _context(source: InputObject | None) -> ToolContext:
    return ToolContext(run_id="r1", agent="tester", call_id="c1", input_object=source)


def test_read_input_reads_only_the_runs_object_and_caps_each_read(pipeline: Pipeline) -> None:
    s3 = pipeline.runtime.s3
    s3.put_bucket_versioning(Bucket=triggers.TRIGGER_BUCKET, VersioningConfiguration={"Status": "Enabled"})
    written = s3.put_object(Bucket=triggers.TRIGGER_BUCKET, Key="inbox/doc.txt", Body=b"a" * 100_000)
    s3.put_object(Bucket=triggers.TRIGGER_BUCKET, Key="inbox/secret.txt", Body=b"secret")
    source = InputObject(
        bucket=triggers.TRIGGER_BUCKET,
        key="inbox/doc.txt",
        version_id=written["VersionId"],
        size=100_000,
        etag=written["ETag"],
        answer_key="answers/doc.txt",
    )
    # The version that started the run is read, even once the key was overwritten.
    s3.put_object(Bucket=triggers.TRIGGER_BUCKET, Key="inbox/doc.txt", Body=b"b" * 10)
    text = read_input.invoke(json.dumps({"offset": 0, "length": MAX_READ_BYTES}), _context(source))
    assert (
        text.startswith("[bytes 0-65535 of 100000; next offset 65536]\naaa")
        and text.count("a") == MAX_READ_BYTES
    )
    assert read_input.invoke('{"offset": 99998}', _context(source)).endswith("end of file]\naa")
    with pytest.raises(InvalidArgumentsError, match="less than or equal to 65536"):
        read_input.invoke(json.dumps({"length": MAX_READ_BYTES + 1}), _context(source))
    with pytest.raises(InvalidArgumentsError, match="key: Extra inputs are not permitted"):
        read_input.invoke('{"key": "inbox/secret.txt"}', _context(source))
    assert "key" not in json.dumps(read_input.spec()["function"]["parameters"]["properties"])
    with pytest.raises(ToolExecutionError, match="offset 100000 is past the end of the file"):
        read_input.invoke('{"offset": 100000}', _context(source))
    with pytest.raises(ToolExecutionError, match="not started by a file"):
        read_input.invoke("{}", _context(None))


def test_read_input_in_an_unversioned_bucket_refuses_an_overwritten_object(pipeline: Pipeline) -> None:
    s3 = pipeline.runtime.s3
    written = s3.put_object(Bucket=triggers.TRIGGER_BUCKET, Key="inbox/doc.txt", Body=b"first")
    source = InputObject(
        bucket=triggers.TRIGGER_BUCKET,
        key="inbox/doc.txt",
        size=5,
        etag=written["ETag"],
        answer_key="answers/doc.txt",
    )
    assert read_input.invoke("{}", _context(source)).endswith("\nfirst")
    s3.put_object(Bucket=triggers.TRIGGER_BUCKET, Key="inbox/doc.txt", Body=b"other")
    with pytest.raises(
        ToolExecutionError, match=r"was deleted or replaced since: .*\(S3 answered PreconditionFailed\)"
    ):
        read_input.invoke("{}", _context(source))
    # Deleted: the model reads that the file is gone, not a bare S3 error (403 without ListBucket).
    s3.delete_object(Bucket=triggers.TRIGGER_BUCKET, Key="inbox/doc.txt")
    with pytest.raises(ToolExecutionError, match=r"s3://[^ ]+/inbox/doc.txt, was deleted or replaced since"):
        read_input.invoke("{}", _context(source))


# --- nothing starts: these share one runtime (after every test with a runtime of its own) ---


def _detail(**changes: Any) -> dict[str, Any]:
    event = sample("eventbridge_run_requested.json")
    event["detail"] = {**event["detail"], **changes}
    return event


def _s3(change: Any) -> dict[str, Any]:
    event = copy.deepcopy(sample("s3_put.json"))
    change(event["Records"][0])
    return event


MALFORMED: dict[str, tuple[Any, str]] = {
    "not an object": ([1, 2], "the event is a JSON list, not an object"),
    "neither shape": ({"hello": "world"}, "not an S3 notification nor an EventBridge event"),
    "no input": (
        {**sample("eventbridge_run_requested.json"), "detail": {"agent": "assistant"}},
        "invalid RunRequested detail: input: Field required",
    ),
    "blank input": (
        _detail(input="   "),
        "invalid RunRequested detail: input: Value error, the input is blank",
    ),
    "unknown field": (_detail(prompt="hi"), "prompt: Extra inputs are not permitted"),
    "unknown agent": (_detail(agent="nobody"), "unknown agent 'nobody'"),
    "bad timezone": (_detail(timezone="../etc"), "not an IANA time zone name"),
    "other detail-type": (
        {**sample("eventbridge_run_requested.json"), "detail-type": "RunCompleted"},
        "unexpected event: source 'toolpipe.requests', detail-type 'RunCompleted' "
        "(expected 'RunRequested' from 'toolpipe.requests')",
    ),
    # The run events' own source, which the functions may put: never a request, however delivered.
    "source not named": (
        {**sample("eventbridge_run_requested.json"), "source": "toolpipe"},
        "RunRequested from source 'toolpipe' is not accepted: this stack takes it from 'toolpipe.requests'",
    ),
    "detail a string": (
        {**sample("eventbridge_run_requested.json"), "detail": "{}"},
        "invalid RunRequested detail",
    ),
    "S3 delete": (
        _s3(lambda r: r.update(eventName="ObjectRemoved:Delete")),
        "unexpected S3 event 'ObjectRemoved:Delete'",
    ),
    "S3 negative size": (_s3(lambda r: r["s3"]["object"].update(size=-1)), "invalid S3 notification"),
    "S3 no sequencer": (
        _s3(lambda r: r["s3"]["object"].pop("sequencer")),
        "has neither versionId nor sequencer",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_event_is_one_clear_error_and_writes_nothing(
    quiet_pipeline: Pipeline, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = quiet_pipeline
    event, reason = MALFORMED[case]
    triggers.put_quietly(pipeline.runtime.s3, "inbox/question.txt", QUESTION)
    caplog.clear()
    result = deliver(event)  # returns: raising would only have Lambda retry it, to the same end
    rejected = result["results"][0] if "results" in result else result
    assert rejected["outcome"] == "rejected" and reason in rejected["reason"], rejected
    assert runs(pipeline) == []
    assert pipeline.runtime.dynamodb.scan(TableName=TABLE)["Items"] == []
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert [r.getMessage() for r in errors] == ["trigger rejected"] and reason in errors[0].reason


@pytest.mark.parametrize(
    ("key", "body", "reason"),
    [
        ("elsewhere/question.txt", QUESTION, "outside the input prefix 'inbox/'"),
        ("inbox/folder/", b"", "a folder, not a file"),
        ("inbox/empty.txt", b"", "empty (0 bytes)"),
        ("inbox/big.txt", b"x" * 1001, "1001 bytes, over the limit of 1000"),
    ],
)
def test_objects_that_are_not_files_to_answer_start_no_run(
    quiet_pipeline: Pipeline, key: str, body: bytes, reason: str
) -> None:
    pipeline = quiet_pipeline
    # Put for real: the notification fires (or not, outside the prefix) and starts nothing.
    pipeline.runtime.s3.put_object(Bucket=triggers.TRIGGER_BUCKET, Key=key, Body=body)
    assert runs(pipeline) == []

    def named(record: dict[str, Any]) -> None:
        record["s3"]["object"].update(key=key, size=len(body))

    skipped = deliver(_s3(named))["results"][0]
    assert skipped["outcome"] == "skipped"
    assert skipped["reason"].startswith(f"s3://toolpipe-local-inputs/{key}: {reason}")
    assert runs(pipeline) == []
