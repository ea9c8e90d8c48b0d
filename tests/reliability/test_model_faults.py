"""Scenario 4: the model endpoint fails on 20% of requests, through the real pipeline (the
`openai` client against the scripted server): 429 with Retry-After, 500, 503, and on another
set of runs 200s whose bodies are garbled JSON, HTML, or trickled byte by byte. Every run
must complete."""

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import CALLS, Pipeline, _pipeline
from tests.reliability.figures import record
from toolpipe.infra.local.scripted_model import HttpError, RawResponse, Reply, _completion

RUNS = 16
FAULT_SHARE = 0.20
MODEL_TIMEOUT_SECONDS = 2.0
TRICKLE_SECONDS_PER_BYTE = 0.015  # a ~500-byte completion takes ~7 s: well past the timeout


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> HttpError:
    return HttpError(status, {"error": {"message": message, "type": "server_error"}}, headers or {})


STATUS_FAULTS = {
    "429 + Retry-After": lambda request: _error(429, "rate limited", {"retry-after": "0.2"}),
    "500": lambda request: _error(500, "internal error"),
    "503": lambda request: _error(503, "overloaded"),
}
BODY_FAULTS = {
    "garbled JSON 200": lambda request: RawResponse(
        200, b'{"id": "chatcmpl-1", "choices": [{"index": 0, "mess'
    ),
    "HTML 200": lambda request: RawResponse(
        200, b"<html><body><h1>502 Bad Gateway</h1></body></html>", {"content-type": "text/html"}
    ),
    "trickled 200": lambda request: RawResponse(
        200,
        json.dumps(_completion(request, Reply(content="done slowly"), 0)).encode(),
        trickle_seconds_per_byte=TRICKLE_SECONDS_PER_BYTE,
    ),
}


class FaultyModel:
    """A model that calls count_once once and then answers. Every fifth request (20%) fails,
    cycling through the fault kinds: a fixed share, so every kind is injected on every run of
    the suite whatever order the concurrent runs' requests arrive in."""

    def __init__(self, faults: dict[str, Any]) -> None:
        self._faults = faults
        self._kinds = sorted(faults)
        self._count = 0
        self._lock = threading.Lock()
        self.injected: dict[str, int] = dict.fromkeys(faults, 0)

    def __call__(self, request: dict[str, Any]) -> Any:
        with self._lock:
            n = self._count
            self._count += 1
            kind = self._kinds[(n // round(1 / FAULT_SHARE)) % len(self._kinds)]
            faulty = n % round(1 / FAULT_SHARE) == 0
            if faulty:
                self.injected[kind] += 1
        if faulty:
            return self._faults[kind](request)
        if request["messages"][-1]["role"] == "tool":
            return Reply(content="done")
        return Reply(tool_calls=[("count_once", {"label": "x"})])


@pytest.fixture
def pipeline_short_timeout() -> Iterator[Pipeline]:
    yield from _pipeline({"TOOLPIPE_MODEL_TIMEOUT": str(MODEL_TIMEOUT_SECONDS)})


def _run_all(p: Pipeline, model: FaultyModel, scenario: str, note: str) -> tuple[bool, dict[str, Any]]:
    p.model.responder = model
    started = time.monotonic()
    run_ids = [p.start(f"count {i}") for i in range(RUNS)]
    statuses: list[str] = []
    errors: list[str] = []
    for run_id in run_ids:
        try:
            body = p.finish(run_id, timeout=90)
        except TimeoutError:
            statuses.append("running")
            continue
        statuses.append(body["run"]["status"])
        if body["run"]["status"] != "succeeded":
            errors.append(str(body["run"]["error"])[:200])
    succeeded = statuses.count("succeeded")
    ran = CALLS.counts.get("count_once", 0)
    met = succeeded == RUNS and ran == RUNS
    injected = ", ".join(f"{n} x {kind}" for kind, n in model.injected.items())
    record(
        scenario,
        tried=RUNS,
        survived=succeeded,
        lost=RUNS - succeeded,
        duplicated=max(0, ran - RUNS),
        goal="100% of runs complete",
        met=met,
        note=(
            f"{note} {len(p.model.requests)} model requests, faults injected: {injected}; "
            f"{time.monotonic() - started:.0f} s. " + (f"First failure: {errors[0]}" if errors else "")
        ),
    )
    return met, {"statuses": statuses, "errors": errors}


def test_status_faults_every_run_completes(pipeline_short_timeout: Pipeline) -> None:
    met, details = _run_all(
        pipeline_short_timeout,
        FaultyModel(STATUS_FAULTS),
        "4a model faults: 429/500/503 on 20% of requests",
        f"{RUNS} runs at once, each a tool turn and an answer; TOOLPIPE_MODEL_TIMEOUT={MODEL_TIMEOUT_SECONDS}.",
    )
    assert met, details


def test_body_faults_every_run_completes(pipeline_short_timeout: Pipeline) -> None:
    p = pipeline_short_timeout
    met, details = _run_all(
        p,
        FaultyModel(BODY_FAULTS),
        "4b model faults: garbled/HTML/trickled 200s on 20% of requests",
        f"{RUNS} runs at once; a trickled completion takes ~7 s against a {MODEL_TIMEOUT_SECONDS} s "
        "per-attempt timeout, so the client must give up on it and retry (the server sees it hang up).",
    )
    assert met, details
    assert p.model.hung_up.is_set(), "a trickled response was read to its end, past the per-attempt timeout"
