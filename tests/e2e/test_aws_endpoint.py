"""The AWS endpoint of `toolpipe serve`: boto3 and the aws CLI against the runtime's own moto.

What goes in over HTTP must be what the in-process handlers see, under the same guarantees:
serialised with their requests, journaled (it survives kill -9) and announced to the listeners
that wake the tool workers.
"""

import concurrent.futures
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests.e2e.test_serve import PROMPT, ROOT, Served, _env
from toolpipe.infra.cli.discovery import read_server_file
from toolpipe.infra.local import serial
from toolpipe.infra.local.aws_endpoint import AwsEndpoint
from toolpipe.infra.local.client import Client
from toolpipe.infra.local.runtime import BUCKET, TABLE, LocalRuntime
from toolpipe.infra.local.workers import queue_request

# moto checks no signature: the credential scope is what routes a request (and an unsigned one
# is anonymous, which a private bucket refuses).
SIGNED_FOR_S3 = (
    "AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0"
)
# Any credentials do. The region is the runtime's.
CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local", "region_name": "us-east-1"}


def _client(service: str, endpoint: str) -> Any:
    # No retries: a request the endpoint fails must show, not be hidden by a second attempt.
    config = Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=30)
    return boto3.client(service, endpoint_url=endpoint, config=config, **CREDENTIALS)  # type: ignore[call-overload]


def _endpoint(served: Served) -> str:
    lines = [line for line in served.lines if line.startswith("AWS endpoint: ")]
    assert len(lines) == 1, served.lines
    return lines[0].removeprefix("AWS endpoint: ").strip()


def _finished_run(url: str) -> str:
    client = Client(url)
    status, body = client.request("POST", "/runs", {"prompt": PROMPT})
    assert status == 202, body
    run_id = str(body["run_id"])
    for event, data in client.events(run_id, timeout=60):
        if event == "end":
            assert data["status"] == "succeeded", data
    return run_id


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = Served(tmp_path_factory.mktemp("aws-endpoint"))
    yield server
    code, output = server.stop()
    assert code == 0, output


def test_serve_prints_and_records_its_aws_endpoint_on_the_api_host(served: Served) -> None:
    endpoint = _endpoint(served)
    info = read_server_file(served.home)

    assert endpoint.startswith("http://127.0.0.1:") and endpoint != served.url
    assert info is not None and info.aws_endpoint == endpoint
    assert Client(served.url).health()[1]["aws_endpoint"] == endpoint


def test_boto3_lists_the_runtimes_table_bucket_queue_and_state_machine(served: Served) -> None:
    endpoint = _endpoint(served)

    assert TABLE in _client("dynamodb", endpoint).list_tables()["TableNames"]
    assert BUCKET in [b["Name"] for b in _client("s3", endpoint).list_buckets()["Buckets"]]
    queues = _client("sqs", endpoint).list_queues()["QueueUrls"]
    assert {q.rsplit("/", 1)[-1] for q in queues} >= {"toolpipe-local-tools", "toolpipe-local-tool-dlq"}
    machines = _client("stepfunctions", endpoint).list_state_machines()["stateMachines"]
    assert [m["name"] for m in machines] == ["toolpipe-local"]


def _copy_items(dynamodb: Any, items: list[dict[str, Any]], run_id: str, copy: str, **changes: Any) -> None:
    for item in items:
        text = json.dumps(item).replace(json.dumps(run_id), json.dumps(copy))
        copied = {**json.loads(text), "pk": {"S": f"RUN#{copy}"}}
        if item["sk"]["S"] == "META":
            copied.update(changes)
        dynamodb.put_item(TableName=TABLE, Item=copied)


def test_the_runs_api_reads_what_was_written_over_the_endpoint(served: Served) -> None:
    endpoint = _endpoint(served)
    dynamodb = _client("dynamodb", endpoint)
    run_id = _finished_run(served.url)
    items = dynamodb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"RUN#{run_id}"}},
        ConsistentRead=True,
    )["Items"]
    copy = f"{run_id}-copy"

    # The run's items, written again under another id over the endpoint: the API (in-process)
    # reads them as a run of its own.
    _copy_items(dynamodb, items, run_id, copy)

    client = Client(served.url)
    original, copied = client.request("GET", f"/runs/{run_id}"), client.request("GET", f"/runs/{copy}")
    assert copied[0] == 200, copied
    assert copied[1]["run"]["run_id"] == copy and copied[1]["run"]["status"] == "succeeded"
    assert (
        client.request("GET", f"/runs/{copy}/messages")[1]["messages"]
        == (client.request("GET", f"/runs/{run_id}/messages")[1]["messages"])
    )
    assert original[1]["run"]["output"] == copied[1]["run"]["output"]


def test_a_write_over_the_endpoint_wakes_the_runs_event_stream(served: Served) -> None:
    dynamodb = _client("dynamodb", _endpoint(served))
    run_id = _finished_run(served.url)
    items = dynamodb.query(
        TableName=TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": f"RUN#{run_id}"}},
        ConsistentRead=True,
    )["Items"]
    copy = f"{run_id}-live"
    _copy_items(dynamodb, items, run_id, copy, status={"S": "running"})
    history, published = sum(i["sk"]["S"].startswith("MSG#") for i in items), 0

    # Shorter than the stream's keep-alive (10 s): only the write's wake-up ends it in time.
    for event, data in Client(served.url).events(copy, timeout=8):
        if event == "item":
            published += 1
            if published == history:  # every history item is out: the stream now waits
                dynamodb.update_item(
                    TableName=TABLE,
                    Key={"pk": {"S": f"RUN#{copy}"}, "sk": {"S": "META"}},
                    UpdateExpression="SET #s = :done",
                    ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues={":done": {"S": "succeeded"}},
                )
        else:
            assert (event, data["status"]) == ("end", "succeeded"), (event, data)
            break


def test_an_object_put_over_the_endpoint_is_read_back_whole(served: Served) -> None:
    s3 = _client("s3", _endpoint(served))
    body = os.urandom(3 * 1024 * 1024)  # past botocore's 1 MiB Expect: 100-continue threshold

    s3.put_object(Bucket=BUCKET, Key="inputs/report one.bin", Body=body, Metadata={"source": "e2e"})

    got = s3.get_object(Bucket=BUCKET, Key="inputs/report one.bin")
    assert got["Body"].read() == body and got["Metadata"] == {"source": "e2e"}
    assert s3.head_object(Bucket=BUCKET, Key="inputs/report one.bin")["ContentLength"] == len(body)
    assert (
        s3.get_object(Bucket=BUCKET, Key="inputs/report one.bin", Range="bytes=0-9")["Body"].read()
        == body[:10]
    )
    # Sent to BUCKET.localhost (virtual-hosted style), as some clients address a bucket.
    host, port = _endpoint(served).removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request(
            "GET",
            "/inputs/report%20one.bin",
            headers={"Host": f"{BUCKET}.localhost:{port}", "Authorization": SIGNED_FOR_S3},
        )
        response = connection.getresponse()
        assert (response.status, response.read()) == (200, body)
    finally:
        connection.close()


@pytest.mark.skipif(shutil.which("aws") is None, reason="the aws CLI is not installed")
def test_aws_cli_cp_puts_an_object_the_runtime_holds(served: Served, tmp_path: Path) -> None:
    endpoint = _endpoint(served)
    source = tmp_path / "notes.txt"
    source.write_text("quarterly notes\n")
    env = {**_env(served.home), "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
    env.pop("AWS_SESSION_TOKEN", None)

    copied = subprocess.run(
        [
            "aws",
            "--endpoint-url",
            endpoint,
            "--region",
            "us-east-1",
            "s3",
            "cp",
            str(source),
            f"s3://{BUCKET}/cli/notes.txt",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert copied.returncode == 0, copied.stderr
    got = _client("s3", endpoint).get_object(Bucket=BUCKET, Key="cli/notes.txt")["Body"].read()
    assert got == b"quarterly notes\n"


def test_a_message_sent_over_the_endpoint_is_taken_by_a_local_worker(served: Served) -> None:
    sqs = _client("sqs", _endpoint(served))
    queue = next(q for q in sqs.list_queues()["QueueUrls"] if q.endswith("/toolpipe-local-tools"))

    # Not a tool call the worker can run: it reports the failure and the message stays in flight
    # (invisible) until its visibility timeout, which is how a taken message shows from outside.
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps({"not": "a tool call"}))

    deadline = time.monotonic() + 10
    while True:
        attributes = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
        if attributes["ApproximateNumberOfMessagesNotVisible"] == "1":
            break
        assert time.monotonic() < deadline, attributes
        time.sleep(0.05)
    assert attributes["ApproximateNumberOfMessages"] == "0"


def test_malformed_requests_get_aws_errors_and_the_server_goes_on(served: Served) -> None:
    endpoint = _endpoint(served)
    host, port = endpoint.removeprefix("http://").split(":")
    signed = "AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0"

    def send(method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    not_json = send(
        "POST", "/", b"{not json", {"X-Amz-Target": "DynamoDB_20120810.PutItem", "Authorization": signed}
    )
    unknown = send("POST", "/", b"{}", {"X-Amz-Target": "DynamoDB_20120810.Explode", "Authorization": signed})
    no_table = send(
        "POST",
        "/",
        b'{"TableName": "nope", "Item": {}}',
        {"X-Amz-Target": "DynamoDB_20120810.PutItem", "Authorization": signed},
    )
    reset = send("POST", "/moto-api/reset", b"", {})  # as moto's server takes it: an S3 path here
    signed_reset = send(
        "POST", "/moto-api/reset", b"", {"Authorization": signed.replace("/dynamodb/", "/motoapi/")}
    )

    for status, body in (not_json, unknown, no_table):
        assert 400 <= status < 600 and "__type" in json.loads(body), (status, body)
    assert no_table[0] == 400 and b"ResourceNotFoundException" in no_table[1]
    assert unknown[0] == 400 and json.loads(unknown[1])["__type"] == "UnknownOperationException"
    assert not_json[0] == 500 and json.loads(not_json[1])["__type"] == "InternalFailure"
    assert reset[0] >= 400 and b"<Code>" in reset[1]  # an S3 request moto fails on, not a reset
    assert signed_reset[0] == 404 and b"<Code>NotFound</Code>" in signed_reset[1]
    assert TABLE in _client("dynamodb", endpoint).list_tables()["TableNames"]  # still serving, nothing reset


def test_writes_over_the_endpoint_survive_kill_9(tmp_path: Path) -> None:
    first = Served(tmp_path)
    endpoint = _endpoint(first)
    _client("s3", endpoint).put_object(Bucket=BUCKET, Key="kept/object.txt", Body=b"still here")
    _client("dynamodb", endpoint).put_item(
        TableName=TABLE, Item={"pk": {"S": "E2E#kill"}, "sk": {"S": "item"}, "n": {"N": "7"}}
    )
    _client("dynamodb", endpoint).update_item(
        TableName=TABLE,
        Key={"pk": {"S": "E2E#kill"}, "sk": {"S": "item"}},
        UpdateExpression="ADD n :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )
    # PartiQL and DeleteObjects are writes too (`aws s3 rm --recursive` sends the latter).
    dynamodb, s3 = _client("dynamodb", endpoint), _client("s3", endpoint)
    dynamodb.execute_statement(
        Statement=f"INSERT INTO \"{TABLE}\" VALUE {{'pk': 'E2E#kill', 'sk': 'partiql'}}"
    )
    dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": "E2E#kill"}, "sk": {"S": "doomed"}})
    dynamodb.execute_statement(Statement=f"DELETE FROM \"{TABLE}\" WHERE pk = 'E2E#kill' AND sk = 'doomed'")
    for name in ("gone/a", "gone/b"):
        s3.put_object(Bucket=BUCKET, Key=name, Body=b"x")
    s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": "gone/a"}, {"Key": "gone/b"}]})

    first.process.send_signal(signal.SIGKILL)
    first.process.wait(timeout=30)
    assert first.process.stdout is not None
    first.process.stdout.close()
    second = Served(tmp_path)
    try:
        endpoint = _endpoint(second)
        body = _client("s3", endpoint).get_object(Bucket=BUCKET, Key="kept/object.txt")["Body"].read()
        item = _client("dynamodb", endpoint).get_item(
            TableName=TABLE, Key={"pk": {"S": "E2E#kill"}, "sk": {"S": "item"}}, ConsistentRead=True
        )["Item"]
        dynamodb = _client("dynamodb", endpoint)
        kept = dynamodb.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "E2E#kill"}},
        )["Items"]
        listed = _client("s3", endpoint).list_objects_v2(Bucket=BUCKET, Prefix="gone/").get("Contents", [])
    finally:
        code, output = second.stop()
    assert code == 0, output
    assert body == b"still here"
    assert item["n"] == {"N": "8"}
    assert sorted(i["sk"]["S"] for i in kept) == ["item", "partiql"]  # inserted kept, deleted gone
    assert listed == []


def test_concurrent_http_and_in_process_writes_lose_nothing_and_are_journaled(tmp_path: Path) -> None:
    increments, threads = 25, 4
    key = {"pk": {"S": "E2E#race"}, "sk": {"S": "counter"}}
    add = {"UpdateExpression": "ADD n :one", "ExpressionAttributeValues": {":one": {"N": "1"}}}
    with LocalRuntime(state_dir=tmp_path, workers=0) as runtime, AwsEndpoint() as endpoint:
        over_http = _client("dynamodb", endpoint.url)
        s3 = _client("s3", endpoint.url)

        def http_writer(n: int) -> None:
            for i in range(increments):
                over_http.update_item(TableName=TABLE, Key=key, **add)
                s3.put_object(Bucket=BUCKET, Key=f"race/{n}/{i}", Body=b"x")

        def in_process_writer(n: int) -> None:
            for _ in range(increments):
                runtime.dynamodb.update_item(TableName=TABLE, Key=key, **add)
                runtime.dynamodb.query(
                    TableName=TABLE,
                    KeyConditionExpression="pk = :pk",
                    ExpressionAttributeValues={":pk": {"S": "E2E#race"}},
                )

        with concurrent.futures.ThreadPoolExecutor(threads * 2) as pool:
            futures = [pool.submit(http_writer, n) for n in range(threads)]
            futures += [pool.submit(in_process_writer, n) for n in range(threads)]
            for future in futures:
                future.result()
        live = runtime.dynamodb.get_item(TableName=TABLE, Key=key, ConsistentRead=True)["Item"]["n"]
        journal = (tmp_path / "journal.jsonl").read_text().splitlines()
    assert live == {"N": str(increments * threads * 2)}
    assert sum('"race/' in line for line in journal) == increments * threads  # the HTTP puts

    with LocalRuntime(state_dir=tmp_path, workers=0) as runtime:
        restored = runtime.dynamodb.get_item(TableName=TABLE, Key=key, ConsistentRead=True)["Item"]["n"]
        objects = runtime.s3.list_objects_v2(Bucket=BUCKET, Prefix="race/")["KeyCount"]
    assert restored == live and objects == increments * threads


def test_a_send_over_http_is_announced_to_the_runtimes_listeners() -> None:
    announced: list[Any] = []
    seen = threading.Event()
    with LocalRuntime(workers=0) as runtime, AwsEndpoint() as endpoint:

        def listener(request: Any) -> None:
            found = queue_request(request, runtime.queue_url)
            if found is not None and found[0] == "SendMessage":
                announced.append(request)
                seen.set()

        serial.add_listener(listener)
        try:
            _client("sqs", endpoint.url).send_message(QueueUrl=runtime.queue_url, MessageBody="{}")
            assert seen.wait(5)
        finally:
            serial.remove_listener(listener)
    assert len(announced) == 1


def test_the_endpoint_adds_little_to_start_up() -> None:
    with LocalRuntime(workers=0):
        started = time.perf_counter()
        with AwsEndpoint() as endpoint:
            ready = time.perf_counter() - started
            _client("sts", endpoint.url).get_caller_identity()
    print(f"AWS endpoint bound and serving in {ready * 1000:.1f} ms")  # measured figure, see the report
    assert ready < 0.5


def test_a_server_started_for_a_while_stays_up_while_the_aws_endpoint_is_used(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "toolpipe.infra.cli", "serve", "--port", "0", "--idle-exit", "1"],
        env=_env(tmp_path),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("toolpipe server at "):
                break
        endpoint = next(line for line in lines if line.startswith("AWS endpoint: ")).split()[-1]
        dynamodb = _client("dynamodb", endpoint)
        busy_until = time.monotonic() + 2.5  # well past the idle exit
        while time.monotonic() < busy_until:
            dynamodb.list_tables()
            time.sleep(0.3)
        assert process.poll() is None, "".join(lines)
        assert process.wait(timeout=30) == 0  # and once left alone, it stops
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)
