"""The triggers on the local runtime as a user drives them: boto3's `put_object` into the
trigger prefix and `put_events` onto the bus each start a run that completes, and `toolpipe
invoke` runs each trigger sample (tests/e2e/test_serve.py checks that serve says where to put them)."""

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.conftest import Capture, Pipeline, _pipeline
from toolpipe.infra.cli import main
from toolpipe.infra.local.runtime import LOCAL_CALLER, TABLE

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pipeline() -> Iterator[Pipeline]:
    yield from _pipeline()


def _runs(pipeline: Pipeline) -> dict[str, dict[str, Any]]:
    items = pipeline.runtime.dynamodb.scan(TableName=TABLE)["Items"]
    return {i["run_id"]["S"]: i for i in items if i["sk"]["S"] == "META"}


def _new_run(pipeline: Pipeline, before: set[str], timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while not (new := set(_runs(pipeline)) - before):
        assert time.monotonic() < deadline, "no run started"
        time.sleep(0.02)
    [run_id] = new
    return run_id


def test_a_file_put_with_boto3_under_the_prefix_starts_a_run_that_answers_next_to_it(
    pipeline: Pipeline,
) -> None:
    before = set(_runs(pipeline))
    s3 = boto3.client("s3", region_name="us-east-1")  # a user's client, as with endpoint_url
    s3.put_object(Bucket=pipeline.runtime.trigger_bucket, Key="inbox/notes/today.txt", Body=b"Buy milk.")
    run_id = _new_run(pipeline, before)
    run = pipeline.finish(run_id)["run"]
    assert run["status"] == "succeeded" and run["caller"] == LOCAL_CALLER
    assert run["input_object"]["key"] == "inbox/notes/today.txt"
    # The demo model read the file through read_input (the prompt only names it).
    assert run["output"] == "The file says: Buy milk."
    answer = s3.get_object(Bucket=pipeline.runtime.trigger_bucket, Key="answers/notes/today.txt.answer.md")
    assert answer["Body"].read().decode() == run["output"]


def test_an_event_put_with_boto3_on_the_bus_starts_a_run_that_completes(pipeline: Pipeline) -> None:
    before = set(_runs(pipeline))
    events = boto3.client("events", region_name="us-east-1")
    detail = {"agent": "assistant", "input": "What is the square root of 16?"}
    put = events.put_events(
        Entries=[
            {
                "EventBusName": pipeline.runtime.event_bus_name,
                "Source": "toolpipe.requests",
                "DetailType": "RunRequested",
                "Detail": json.dumps(detail),
            }
        ]
    )
    assert put["FailedEntryCount"] == 0
    run_id = _new_run(pipeline, before)
    run = pipeline.finish(run_id)["run"]
    assert run["status"] == "succeeded" and "4" in run["output"]


def test_events_put_together_each_start_their_run_at_once(pipeline: Pipeline) -> None:
    """Three `RunRequested` in one `PutEvents`: three messages for the trigger queue's one
    worker. Woken once for the request, it took one and left the others to its safety poll,
    5 s apart."""
    before = set(_runs(pipeline))
    events = boto3.client("events", region_name="us-east-1")
    started = time.monotonic()
    put = events.put_events(
        Entries=[
            {
                "EventBusName": pipeline.runtime.event_bus_name,
                "Source": "toolpipe.requests",
                "DetailType": "RunRequested",
                "Detail": json.dumps({"agent": "assistant", "input": f"What is the square root of {n * n}?"}),
            }
            for n in (4, 5, 6)
        ]
    )
    assert put["FailedEntryCount"] == 0
    deadline = time.monotonic() + 30
    while len(set(_runs(pipeline)) - before) < 3:
        assert time.monotonic() < deadline, "not every run started"
        time.sleep(0.02)
    assert time.monotonic() - started < 4  # the third came 10 s later, at the second safety poll


@pytest.mark.parametrize(
    ("function", "sample", "extra", "expected"),
    [
        ("triggers", "s3_put.json", ["--object", "events/s3_put.txt"], {"results": [{"outcome": "started"}]}),
        # A file of your own: the notification tells of that put (its eTag and size), not the sample's.
        ("triggers", "s3_put.json", ["--object", "README.md"], {"results": [{"outcome": "started"}]}),
        ("triggers", "eventbridge_run_requested.json", [], {"outcome": "started"}),
        ("triggers", "schedule_run_requested.json", [], {"outcome": "started"}),
        # No run of that id: the status-change handler says so, and changes nothing.
        ("orchestrator", "execution_status_change.json", ["--run-id", "nosuchrun"], {"status": "ignored"}),
    ],
)
def test_toolpipe_invoke_runs_each_trigger_sample_against_the_real_handler(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    function: str,
    sample: str,
    extra: list[str],
    expected: Any,
) -> None:
    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path))
    monkeypatch.chdir(ROOT)
    out = Capture()
    assert main(["invoke", function, f"events/{sample}", *extra], out=out) == 0, out.text
    result = json.loads(out.text)  # stdout is the result alone
    if "results" in expected:
        assert [r["outcome"] for r in result["results"]] == ["started"]
    else:
        assert {k: result[k] for k in expected} == expected


def test_through_serves_aws_endpoint_a_file_and_an_event_each_start_a_run_that_completes(
    tmp_path: Path,
) -> None:
    """As a user outside the process does it: boto3 with the `AWS endpoint:` serve prints."""
    from tests.e2e.test_aws_endpoint import _client, _endpoint
    from tests.e2e.test_serve import Served
    from toolpipe.infra.local.client import Client
    from toolpipe.shared.runs.starter import keyed_run_id

    served = Served(tmp_path)
    try:
        endpoint = _endpoint(served)
        s3, events = _client("s3", endpoint), _client("events", endpoint)
        s3.put_object(Bucket="toolpipe-local-inputs", Key="inbox/served.txt", Body=b"What is 2+3?")
        put = events.put_events(
            Entries=[
                {
                    "EventBusName": "toolpipe-local-events",
                    "Source": "toolpipe.requests",
                    "DetailType": "RunRequested",
                    "Detail": json.dumps({"agent": "assistant", "input": "What is the square root of 16?"}),
                }
            ]
        )
        # One run per event id, owned by the local user: its id follows from both.
        run_id = keyed_run_id(LOCAL_CALLER, f"eventbridge:{put['Entries'][0]['EventId']}")
        deadline = time.monotonic() + 10
        while Client(served.url).request("GET", f"/runs/{run_id}")[0] != 200:  # started off the request
            assert time.monotonic() < deadline, "the event started no run"
            time.sleep(0.02)
        ends = [data for event, data in Client(served.url).events(run_id, timeout=60) if event == "end"]
        assert ends and ends[0]["run"]["status"] == "succeeded", ends
        deadline = time.monotonic() + 60
        while True:  # the file's run ends by writing its answer
            listed = s3.list_objects_v2(Bucket="toolpipe-local-inputs", Prefix="answers/")
            if listed.get("KeyCount"):
                break
            assert time.monotonic() < deadline, "no answer written"
            time.sleep(0.05)
        assert [o["Key"] for o in listed["Contents"]] == ["answers/served.txt.answer.md"]
    finally:
        code, out = served.stop()
    assert code == 0, out
