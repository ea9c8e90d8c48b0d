"""Scenario 8: 200 malformed or hostile requests to the runs API (bodies, paths, methods, huge
values, wrong types) through the real API handler as API Gateway proxy events: none may be
answered with a 5xx (a Lambda error is API Gateway's 502)."""

import base64
import json
import random
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Pipeline, _pipeline
from tests.reliability.figures import record
from toolpipe.infra.local.lambdas import LocalContext, call_handler

API = "toolpipe.functions.api.handler.lambda_handler"


def _event(method: str, path: str, body: Any = None, **overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "resource": path,
        "path": path,
        "httpMethod": method,
        "headers": {"content-type": "application/json"},
        "multiValueHeaders": {},
        "queryStringParameters": None,
        "pathParameters": None,
        "requestContext": {"requestId": str(uuid.uuid4()), "stage": "local", "httpMethod": method},
        "body": body,
        "isBase64Encoded": False,
    }
    event.update(overrides)
    return event


def _start(fields: dict[str, Any]) -> str:
    return json.dumps({"prompt": "hi", "agent": "tester", **fields})


def _requests(rng: random.Random) -> list[tuple[str, dict[str, Any]]]:
    r: list[tuple[str, dict[str, Any]]] = []

    def post(label: str, body: Any, **overrides: Any) -> None:
        r.append((f"POST /runs {label}", _event("POST", "/runs", body, **overrides)))

    for label, body in [
        ("no body", None),
        ("empty body", ""),
        ("not JSON", "{prompt: hi"),
        ("null", "null"),
        ("array", "[]"),
        ("string", '"hi"'),
        ("number", "42"),
        ("true", "true"),
        ("BOM + JSON", "\ufeff" + _start({})),
        ("deep nesting", '{"prompt": ' + "[" * 20_000 + "]" * 20_000 + "}"),
        ("duplicate keys", '{"prompt": "a", "prompt": "b", "agent": "tester"}'),
        ("NUL in prompt", _start({"prompt": "a\u0000b"})),
        ("lone surrogate in prompt", '{"prompt": "\\ud800", "agent": "tester"}'),
        ("lone surrogate in agent", '{"prompt": "hi", "agent": "\\udfff"}'),
        ("lone surrogate in caller", '{"prompt": "hi", "agent": "tester", "caller": "\\ud83d"}'),
        ("lone surrogate in timezone", '{"prompt": "hi", "agent": "tester", "timezone": "\\ud800"}'),
        ("lone surrogate in tools", '{"prompt": "hi", "agent": "tester", "tools": ["\\ud800"]}'),
    ]:
        post(label, body)
    for field, values in {
        "prompt": [None, 1, 1.5, True, [], {}, ["a"], "", " ", "p" * 100_001, "p" * 2_000_000, 10**400],
        "agent": [None, 1, [], {}, "", "no-such-agent", "a" * 100_000, "../tester", "tester\n", "TESTER"],
        "timezone": [None, 1, [], "", "Mars/Olympus", "../../etc/passwd", "z" * 100_000, "UTC\u0000"],
        "caller": [1, [], {}, "c" * 257, "c" * 1_000_000, "\u0000"],
        "tools": ["count_once", [1], [None], [[]], [{}], ["no_such_tool"], ["count_once"] * 100_000, []],
        "extra": [1, "x" * 1_000_000],
        "results": [[{"seq": 1}]],
    }.items():
        for i, value in enumerate(values):
            post(f"{field}={str(value)[:20]!r} #{i}", _start({field: value}))
    post("base64 flagged, not base64", "!!!", isBase64Encoded=True)
    post("base64 of garbage", base64.b64encode(bytes(range(256))).decode(), isBase64Encoded=True)
    post("text/plain", _start({}), headers={"content-type": "text/plain"})
    post("headers null", _start({}), headers=None)
    post("form body", "prompt=hi&agent=tester", headers={"content-type": "application/x-www-form-urlencoded"})
    post("10 MB body", json.dumps({"prompt": "p" * 10_000_000, "agent": "tester"}))
    post("query string", _start({}), queryStringParameters={"q": "x" * 100_000})

    ids = [
        "no-such-run",
        "",
        " ",
        "r" * 1_000,
        "r" * 2_049,
        "r" * 100_000,
        "%00",
        "\u0000",
        "..%2F..%2Fetc%2Fpasswd",
        "../../etc/passwd",
        "RUN#x",
        "x#META",
        "名前",
        "\ud800",
        "'; DROP TABLE runs; --",
        "${jndi:ldap://x}",
        "1e400",
        "null",
        "%",
    ]
    for run_id in ids:
        r.append((f"GET /runs/{run_id[:20]!r}", _event("GET", f"/runs/{run_id}")))
    seqs = [
        "0",
        "-1",
        "1",
        "1.5",
        "abc",
        "",
        "99999999999999999999999",
        "9" * 5_000,
        "²",
        "١٢",
        "\U0001d7d9",  # MATHEMATICAL DOUBLE-STRUCK DIGIT ONE
        " 1",
        "1e3",
        "0x10",
    ]
    for seq in seqs:
        r.append((f"GET message {seq[:20]!r}", _event("GET", f"/runs/no-such-run/messages/{seq}")))
    for run_id in ["r" * 2_049, "\ud800", ""]:
        r.append((f"GET message of run {run_id[:10]!r}", _event("GET", f"/runs/{run_id}/messages/1")))
    for method in ["PUT", "PATCH", "DELETE", "OPTIONS", "HEAD", "TRACE", "CONNECT", "BREW", "", "get"]:
        for path in ["/runs", "/runs/x", "/runs/x/messages/1"]:
            r.append((f"{method or '(empty)'} {path}", _event(method, path, _start({}))))
    for path in [
        "/",
        "",
        "/admin",
        "/runs/x/y/z",
        "/runs/" + "a/" * 5_000,
        "//runs",
        "/runs?x=1",
        "/RUNS",
        "/runs/",
    ]:
        r.append((f"GET {path[:20]!r}", _event("GET", path)))
        r.append((f"POST {path[:20]!r}", _event("POST", path, _start({}))))
    # Random junk: fragments of JSON, bytes, and valid requests with one value swapped for junk.
    junk: list[Any] = [None, -1, 2**63, 1e308, "", "\u0000", "x" * 70_000, [None] * 1_000, {"a": {"b": {}}}]
    for i in range(45):
        if i % 3 == 0:
            body = bytes(rng.randrange(1, 256) for _ in range(rng.randrange(1, 400))).decode("latin-1")
        elif i % 3 == 1:
            body = _start({})[: rng.randrange(1, 40)]
        else:
            field = rng.choice(["prompt", "agent", "timezone", "caller", "tools"])
            body = _start({field: rng.choice(junk)})
        post(f"junk #{i}", body)
    rng.shuffle(r)
    return r


@pytest.fixture
def api() -> Iterator[Pipeline]:
    yield from _pipeline(workers=0)


def test_hostile_requests_get_no_5xx(api: Pipeline) -> None:
    requests = _requests(random.Random(8))
    api.runtime.drain_seconds = 0  # the runs some requests start are not the point: stop them
    failures: dict[str, str] = {}
    answered: dict[int, int] = {}
    for label, event in requests:
        try:
            response = call_handler(API, event, LocalContext(function_name="api", timeout_seconds=29))
            status = int(response["statusCode"])
            reason = str(response.get("body"))[:120]
        except Exception as e:  # a function error: API Gateway answers 502
            status, reason = 502, f"{type(e).__name__}: {str(e)[:120]}"
        answered[status] = answered.get(status, 0) + 1
        if status >= 500:
            failures[label] = reason
    by_status = ", ".join(f"{s}: {n}" for s, n in sorted(answered.items()))
    record(
        "8 malformed or hostile API requests",
        tried=len(requests),
        survived=len(requests) - len(failures),
        lost=len(failures),
        duplicated=0,
        goal="0 answers >= 500",
        met=not failures,
        note=(
            f"answers by status: {by_status}. "
            + (
                "5xx for: " + "; ".join(f"{k} -> {v}" for k, v in sorted(failures.items()))
                if failures
                else ""
            )
        ),
    )
    assert not failures, json.dumps(failures, indent=1)
