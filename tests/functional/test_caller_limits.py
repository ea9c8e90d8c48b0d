"""Caller identities near DynamoDB's key limit: every identity the API accepts fits every key
it is written into; a longer one is a 400 before anything is written.

The limit is in UTF-8 bytes, not characters: the identities below mix 1-, 2- and 3-byte
characters, as a Lambda authorizer's `principalId` may.
"""

import json
import uuid
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.conftest import Pipeline
from toolpipe.infra.cdk.functions import API
from toolpipe.infra.local.lambdas import call_function
from toolpipe.infra.local.runtime import BUCKET, LOCAL_CALLER, REGION, TABLE
from toolpipe.shared.deferred import ApprovalStatus
from toolpipe.shared.deferred.models import Approval
from toolpipe.shared.deferred.store import DynamoApprovalStore
from toolpipe.shared.dynamo import (
    APPROVALS_OF_CALLER,
    MAX_CALLER_BYTES,
    PARTITION_KEY_MAX_BYTES,
    RUNS_OF_CALLER,
)
from toolpipe.shared.history import DynamoHistoryStore
from toolpipe.shared.messages import RunRecord, RunStatus, UserMessage


def identity(size: int) -> str:
    """A principal id of exactly `size` bytes of UTF-8, fewer characters than bytes."""
    text = "principal/"
    for character in "é€" * size:  # 2 and 3 bytes
        if len(text.encode()) + len(character.encode()) + 1 > size:
            break
        text += character
    return text + "a" * (size - len(text.encode()))


def _authorized(method: str, path: str, principal: str, body: Any = None) -> tuple[int, Any]:
    """A request through the API handler as API Gateway sends it behind a Lambda authorizer."""
    resource, _, query = path.partition("?")
    parameters = dict(p.split("=", 1) for p in query.split("&") if "=" in p) or None
    event = {
        "resource": resource,
        "path": resource,
        "httpMethod": method,
        "headers": {"content-type": "application/json"},
        "multiValueHeaders": {},
        "queryStringParameters": parameters,
        "multiValueQueryStringParameters": {k: [v] for k, v in (parameters or {}).items()} or None,
        "pathParameters": None,
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "stage": "v1",
            "httpMethod": method,
            "identity": {"sourceIp": "203.0.113.7", "userArn": None},
            "authorizer": {"principalId": principal},
        },
        "body": None if body is None else json.dumps(body),
        "isBase64Encoded": False,
    }
    response = call_function(API, event)
    return int(response["statusCode"]), json.loads(response["body"]) if response.get("body") else None


def _stores() -> tuple[DynamoHistoryStore, DynamoApprovalStore]:
    table = boto3.resource("dynamodb", region_name=REGION).Table(TABLE)
    runs = DynamoHistoryStore(table, boto3.client("s3", region_name=REGION), BUCKET)
    return runs, DynamoApprovalStore(table)


def _write_run(store: DynamoHistoryStore, caller: str) -> None:
    record = RunRecord(run_id=uuid.uuid4().hex, agent="tester", status=RunStatus.RUNNING, caller=caller)
    store.create_run(record, UserMessage(seq=1, turn=0, content="hi"))


def _write_approval(store: DynamoApprovalStore, requester: str) -> None:
    store.create(
        Approval(
            approval_id=uuid.uuid4().hex,
            run_id=uuid.uuid4().hex,
            seq=3,
            message_seq=2,
            turn=1,
            call_id="c1",
            tool="wire_money",
            arguments_sha256="0" * 64,
            arguments_preview="{}",
            requester=requester,
            status=ApprovalStatus.PENDING,
            created_at="2026-11-22T10:00:00.000+00:00",
            expires_at="2026-11-23T10:00:00.000+00:00",
        ),
        "token",
    )


def test_the_limit_is_the_room_the_tightest_key_holding_a_caller_leaves(pipeline: Pipeline) -> None:
    runs, approvals = _stores()
    # Each key that holds a caller, written by the real store into moto's table: it takes its
    # own room exactly and not a byte more.
    room = {}
    for prefix, write in (
        (RUNS_OF_CALLER, lambda c: _write_run(runs, c)),
        (APPROVALS_OF_CALLER, lambda c: _write_approval(approvals, c)),
    ):
        room[prefix] = PARTITION_KEY_MAX_BYTES - len(prefix.encode())
        write(identity(room[prefix]))
        with pytest.raises(ClientError, match="Size of hashkey has exceeded"):
            write(identity(room[prefix] + 1))

    assert MAX_CALLER_BYTES == min(room.values()) == 2038


def test_an_identity_of_the_limit_starts_a_run_and_one_byte_more_is_a_400(pipeline: Pipeline) -> None:
    longest = identity(MAX_CALLER_BYTES)
    assert len(longest) < MAX_CALLER_BYTES  # fewer characters: bytes are what is counted

    status, started = _authorized("POST", "/runs", longest, {"input": "What is 2+3?"})
    assert status == 202, started
    assert _authorized("GET", f"/runs/{started['run_id']}", longest)[1]["run"]["caller"] == longest
    listed = _authorized("GET", "/runs", longest)[1]["runs"]
    assert [run["run_id"] for run in listed] == [started["run_id"]]
    pipeline.runtime.wait_for_execution(started["run_id"], 60)

    for too_long in (identity(MAX_CALLER_BYTES + 1), "\ud800" + "a" * 10):
        for method, path in (("POST", "/runs"), ("GET", "/runs"), ("GET", "/approvals")):
            status, body = _authorized(method, path, too_long, {"input": "hi"} if method == "POST" else None)
            assert status == 400, (path, body)
            assert body["message"] == "invalid request: the caller identity is at most 2,038 bytes of UTF-8"


def test_a_page_token_does_not_grow_with_the_identity(pipeline: Pipeline) -> None:
    longest = identity(MAX_CALLER_BYTES)
    started = [_authorized("POST", "/runs", longest, {"input": f"run {i}"})[1]["run_id"] for i in range(3)]
    status, page = _authorized("GET", "/runs?limit=2", longest)
    assert status == 200 and page["next"] and len(page["next"]) < 300
    status, rest = _authorized("GET", f"/runs?limit=2&next={page['next']}", longest)
    assert status == 200, rest
    assert {r["run_id"] for r in page["runs"] + rest["runs"]} == set(started) and rest["next"] is None
    for run_id in started:
        pipeline.runtime.wait_for_execution(run_id, 60)


def test_the_admin_names_an_owner_within_the_same_limit(pipeline: Pipeline) -> None:
    # The `caller` parameter counts characters (its schema's maxLength) and then bytes.
    status, body = pipeline.runtime.api("GET", f"/runs?caller={'é' * (MAX_CALLER_BYTES // 2 + 1)}")
    assert status == 400
    assert body["message"] == (
        "invalid request: query.caller: caller is a principal's ARN (or `*`), is at most 2,038 bytes of UTF-8"
    )
    assert pipeline.runtime.api("GET", f"/runs?caller={'a' * (MAX_CALLER_BYTES + 1)}")[0] == 400
    # Within the limit, only the admin may name another owner: the limit is checked first.
    assert (
        pipeline.runtime.api("GET", f"/runs?caller={identity(MAX_CALLER_BYTES)}", caller=LOCAL_CALLER)[0]
        == 403
    )
