"""200 hostile requests, drawn from a fixed seed, against the real API handler: every one is
answered with a 4xx and a one-line message, none with a 5xx, and none writes anything."""

import base64
import json
import random
from typing import Any

from tests.conftest import Pipeline
from toolpipe.infra.cdk.functions import API
from toolpipe.infra.local.lambdas import call_function
from toolpipe.infra.local.runtime import LOCAL_CALLER

# Values no start field accepts.
HOSTILE_VALUES: list[Any] = [
    None,
    0,
    -1,
    1.5,
    10**40,
    True,
    [],
    {},
    "",
    " \n\t",
    "\u00b2",
    "\u0663",
    "\uff10",
    "../../etc/passwd",
    "%2e%2e%2f",
    "\x00",
    "x" * 200_000,
    "\U0001f600" * 70_000,
    {"$ne": None},
    [[[[["deep"]]]]],
]
FIELDS = ["prompt", "agent", "timezone", "tools"]
RAW_BODIES = [
    "",
    "{",
    "}",
    "[]",
    "null",
    "NaN",
    "1e999",
    "9" * 5_000,
    '{"prompt": "a", "prompt": 1}',
    "\ufeff{}",
    '{"prompt": "\\udfff"}',
    "[" * 50_000 + "]" * 50_000,
    '{"prompt": {"prompt": {"prompt": "a"}}}',
    "\x00" * 100,
]
SEGMENTS = [
    "\u00b2",
    "\u0663",
    "\uff11",
    "9" * 5_000,
    "-1",
    "1.5",
    "1e3",
    " 1",
    "%00",
    "..",
    "a" * 65,
    "\U0001f600",
    "a b",
    "$",
    "0x10",
    "",
]


def _event(method: str, path: str, body: str | None, context: Any, *, b64: bool = False) -> dict[str, Any]:
    resource, _, query = path.partition("?")
    params = dict(p.split("=", 1) for p in query.split("&") if "=" in p) or None
    return {
        "resource": resource,
        "path": resource,
        "httpMethod": method,
        "headers": {"content-type": "application/json"},
        "multiValueHeaders": {},
        "queryStringParameters": params,
        "multiValueQueryStringParameters": {k: [v] for k, v in params.items()} if params else None,
        "pathParameters": None,
        "requestContext": context,
        "body": body,
        "isBase64Encoded": b64,
    }


def _requests(rng: random.Random) -> list[dict[str, Any]]:
    me = {"requestId": "fuzz", "identity": {"userArn": LOCAL_CALLER}}
    events = []
    for _ in range(60):  # one start field hostile, or an unknown one
        body: dict[str, Any] = {"prompt": "hi", "agent": "tester"}
        field = rng.choice([*FIELDS, "caller", "admin", "__proto__"])
        body[field] = rng.choice(HOSTILE_VALUES)
        if (
            field == "prompt"
            and isinstance(body[field], str)
            and body[field].strip()
            and len(body[field]) <= 100_000
        ):
            body["agent"] = "../" + body[field][:10]  # an acceptable prompt: break the request elsewhere
        if field == "tools" and body[field] in (None, []):  # both mean a valid allow-list
            body[field] = [rng.choice(SEGMENTS)]  # unknown to the agent, or not a tool name
        events.append(_event("POST", "/runs", json.dumps(body), me))
    for _ in range(30):  # bodies that are not a run request at all
        events.append(_event("POST", "/runs", rng.choice(RAW_BODIES), me))
    for _ in range(10):  # base64 bodies: invalid UTF-8, invalid base64
        raw = bytes(rng.randrange(128, 256) for _ in range(rng.randrange(1, 50)))
        encoded = rng.choice([base64.b64encode(b'{"prompt": "' + raw + b'"}').decode(), "not base64!"])
        events.append(_event("POST", "/runs", encoded, me, b64=True))
    for _ in range(60):  # hostile paths and query strings
        a, b = rng.choice(SEGMENTS), rng.choice(SEGMENTS)
        path = rng.choice(
            [
                f"/runs/{a}",
                f"/runs/{a}/messages/{b}",
                f"/runs/x/messages/{b}",
                f"/runs/x/messages?after={a}&limit={b}",
            ]
        )
        events.append(_event("GET", path, None, me))
    for _ in range(20):  # methods and routes that do not exist
        events.append(
            _event(
                rng.choice(["PUT", "DELETE", "PATCH", "GET"]),
                rng.choice(["/runs", "/", "/runs/x/y"]),
                "{}",
                me,
            )
        )
    for _ in range(20):  # missing or malformed identities
        context = rng.choice(
            [
                {},
                {"identity": None},
                {"identity": "arn"},
                {"identity": {"userArn": 5}},
                {"identity": {"userArn": ""}},
                {"authorizer": []},
                {"authorizer": {"principalId": None}},
            ]
        )
        events.append(
            _event(rng.choice(["POST", "GET"]), rng.choice(["/runs", "/runs/x"]), '{"prompt": "hi"}', context)
        )
    return events


def test_hostile_requests_never_get_a_5xx_nor_write(pipeline: Pipeline) -> None:
    events = _requests(random.Random(20261122))
    assert len(events) == 200

    answers = []
    for event in events:
        response = call_function(API, event)
        body = json.loads(response["body"])
        answers.append((int(response["statusCode"]), event["httpMethod"], event["path"][:40], body))

    server_errors = [a for a in answers if a[0] >= 500]
    assert server_errors == []
    # `GET /runs` (or `/runs/`) is the caller's listing, which is empty here: the only 200.
    listings = [a for a in answers if a[1] == "GET" and a[2].rstrip("/") == "/runs" and a[0] == 200]
    assert all(a[3] == {"runs": [], "next": None} for a in listings)
    assert [a for a in answers if not 400 <= a[0] < 500 and a not in listings] == []
    assert all(
        isinstance(b.get("message"), str) and "\n" not in b["message"]
        for *_, b in answers
        if b not in [a[3] for a in listings]
    )
    assert pipeline.runtime.dynamodb.scan(TableName="toolpipe-local")["Items"] == []
