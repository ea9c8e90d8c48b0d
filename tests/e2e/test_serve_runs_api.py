"""The runs API over real HTTP, as a client uses it against `toolpipe serve` (issue 8, item 1)."""

import http.client
import json
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import GATE, Pipeline, Reply, call, gated_server, wait_for_gate
from tests.e2e.test_serve import Served, _toolpipe
from tests.openapi_check import checker, response_conforms
from toolpipe.infra.local.server import LocalServer
from toolpipe.shared.agents import Agent

PROMPT = "What is the square root of 475695037565?"  # the demo model answers it


def _http(
    url: str, method: str, body: Any = None, **headers: str
) -> tuple[int, Any, http.client.HTTPMessage]:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        data = None if body is None else json.dumps(body).encode()
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(method, path, body=data, headers={"Content-Type": "application/json", **headers})
        response = connection.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else None, response.headers
    finally:
        connection.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = Served(tmp_path_factory.mktemp("serve-api"))
    yield server
    code, output = server.stop()
    assert code == 0, output


def test_start_with_a_key_poll_read_list_over_http(served: Served) -> None:
    request = {"input": PROMPT, "agent": "assistant", "metadata": {"ticket": "T-7"}}
    status, started, headers = _http(
        f"{served.api_url}/runs", "POST", request, **{"Idempotency-Key": "e2e-1"}
    )
    assert status == 202 and headers.get("Idempotent-Replayed") is None
    run_id = started["run_id"]
    # The status URL is absolute, from the Host header the server was reached by.
    assert started["status_url"] == f"{served.api_url}/runs/{run_id}"
    status, again, headers = _http(f"{served.api_url}/runs", "POST", request, **{"Idempotency-Key": "e2e-1"})
    assert (status, again["run_id"], headers.get("Idempotent-Replayed")) == (202, run_id, "true")
    status, conflict_body, _ = _http(
        f"{served.api_url}/runs", "POST", {**request, "input": "other"}, **{"Idempotency-Key": "e2e-1"}
    )
    assert status == 409 and run_id in conflict_body["message"]

    deadline = time.monotonic() + 60
    while True:  # poll the status URL as a client would
        status, shown, _ = _http(started["status_url"], "GET")
        assert status == 200
        if shown["run"]["status"] != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert shown["run"]["status"] == "succeeded" and shown["run"]["metadata"] == {"ticket": "T-7"}
    status, page, _ = _http(f"{served.api_url}/runs/{run_id}/messages?limit=2", "GET")
    assert status == 200 and page["messages"][0]["content"] == PROMPT and len(page["messages"]) == 2
    status, rest, _ = _http(f"{served.api_url}{page['next']}", "GET")
    assert status == 200 and rest["messages"][-1]["kind"] == "assistant"
    status, listed, _ = _http(f"{served.api_url}/runs?agent=assistant&status=succeeded", "GET")
    assert status == 200 and run_id in [r["run_id"] for r in listed["runs"]]
    assert [r["run_id"] for r in listed["runs"]].count(run_id) == 1
    status, conflict, _ = _http(f"{served.api_url}/runs/{run_id}/cancel", "POST")
    assert status == 409
    status, document, _ = _http(f"{served.api_url}/openapi.json", "GET")
    assert status == 200 and "/runs/{run_id}/cancel" in document["paths"]
    served_document = json.loads(json.dumps(document))  # a copy: the checks below edit `document`
    # The checked-in document, with what only this server knows: the app's agents and their
    # tools, the header that names the caller. Time zones are a pattern in both.
    checked_in = json.loads((Path(__file__).parents[2] / "docs" / "openapi.json").read_text())
    start = document["components"]["schemas"].pop("StartRunRequest")
    assert start["properties"]["agent"]["anyOf"][0]["enum"] == ["assistant", "triage"]
    assert "square_root" in start["properties"]["tools"]["anyOf"][0]["items"]["enum"]
    assert "enum" not in start["properties"]["timezone"]
    del checked_in["components"]["schemas"]["StartRunRequest"]
    assert document["components"]["securitySchemes"].pop("localCaller")["name"] == "X-Toolpipe-Caller"
    for operations in document["paths"].values():
        for operation in operations.values():
            if operation["security"]:  # not the approval page's, whose link is the credential
                assert operation["security"].pop() == {"localCaller": []}
    assert checked_in == document
    # The real answers above, against the document the server serves (openapi-core: issue 35).
    spec = checker(served_document)
    for method, target, status, body, sent in (
        ("POST", "/runs", 202, started, request),
        ("POST", "/runs", 409, conflict_body, {**request, "input": "other"}),
        ("GET", f"/runs/{run_id}", 200, shown, None),
        ("GET", f"/runs/{run_id}/messages?limit=2", 200, page, None),
        ("GET", page["next"], 200, rest, None),
        ("GET", "/runs?agent=assistant&status=succeeded", 200, listed, None),
        ("POST", f"/runs/{run_id}/cancel", 409, conflict, None),
    ):
        response_conforms(spec, method, target, status, body, sent)


def test_delete_an_ended_run_with_the_cli_then_over_http(served: Served) -> None:
    status, started, _ = _http(f"{served.api_url}/runs", "POST", {"input": PROMPT, "agent": "assistant"})
    assert status == 202
    run_id = started["run_id"]
    deadline = time.monotonic() + 60
    while _http(started["status_url"], "GET")[1]["run"]["status"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    deleted = _toolpipe(served.home, "delete", run_id)
    assert (deleted.returncode, deleted.stdout) == (0, f"deleted {run_id}\n"), deleted.stderr
    assert _http(started["status_url"], "GET")[0] == 404
    assert _http(started["status_url"], "DELETE")[:2] == (
        404,
        {"statusCode": 404, "message": f"run {run_id} not found"},
    )
    again = _toolpipe(served.home, "delete", run_id)
    assert again.returncode != 0 and again.stdout == "" and f"run {run_id} not found" in again.stderr
    assert "Traceback" not in again.stderr


def test_resume_and_fork_with_the_cli(served: Served) -> None:
    status, started, _ = _http(f"{served.api_url}/runs", "POST", {"input": PROMPT, "agent": "assistant"})
    assert status == 202
    run_id = started["run_id"]
    deadline = time.monotonic() + 60
    while _http(started["status_url"], "GET")[1]["run"]["status"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)

    refused = _toolpipe(served.home, "resume", run_id, "--max-tool-calls", "80")
    assert refused.returncode == 1 and refused.stdout == "" and "Traceback" not in refused.stderr
    assert f"run {run_id} cannot be resumed: it is succeeded" in refused.stderr
    forked = _toolpipe(served.home, "fork", run_id, "--turn", "0", "--json")
    assert forked.returncode == 0, forked.stderr
    fork_id = json.loads(forked.stdout)["run_id"]
    while (shown := _http(f"{served.api_url}/runs/{fork_id}", "GET")[1])["run"]["status"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert shown["run"]["status"] == "succeeded"
    assert shown["run"]["forked_from"] == {"run_id": run_id, "turn": 0}
    parent = _http(started["status_url"], "GET")[1]["run"]
    assert parent["forks"] == [fork_id]
    shown_fork = _toolpipe(served.home, "show", fork_id)
    assert f"forked from run {run_id} after turn 0\n" in shown_fork.stdout, shown_fork.stderr
    assert f"forked into run {fork_id}\n" in _toolpipe(served.home, "show", run_id).stdout
    too_far = _toolpipe(served.home, "fork", run_id, "--turn", "99")
    assert too_far.returncode == 1 and "Traceback" not in too_far.stderr
    assert f"cannot be forked there: its last turn is {parent['turn']}, not 99" in too_far.stderr


HELD = Agent(name="held", instructions="You wait.", tools=[wait_for_gate], max_iterations=3)


@pytest.fixture
def local_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Pipeline, LocalServer]]:
    yield from gated_server(monkeypatch, HELD)


def test_cancel_a_running_run_over_http(local_server: tuple[Pipeline, LocalServer]) -> None:
    pipeline, server = local_server
    pipeline.script(Reply(tool_calls=[call("wait_for_gate", label="a")]), Reply(content="never asked"))
    status, started, _ = _http(f"{server.api_url}/runs", "POST", {"input": "wait", "agent": "held"})
    assert status == 202
    run_id = started["run_id"]
    status, listed, _ = _http(f"{server.api_url}/runs?status=running", "GET")
    assert [r["run_id"] for r in listed["runs"]] == [run_id]
    claim = {"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "CALL#000003"}}
    deadline = time.monotonic() + 20
    while "Item" not in pipeline.runtime.dynamodb.get_item(TableName="toolpipe-local", Key=claim):
        assert time.monotonic() < deadline, "the call never started"
        time.sleep(0.05)  # until its tool is running: the run waits on it
    status, refused, _ = _http(started["status_url"], "DELETE")
    assert status == 409 and refused["message"].endswith("still running; cancel it first")
    status, cancelled, _ = _http(f"{server.api_url}/runs/{run_id}/cancel", "POST")
    assert status == 200 and cancelled == {
        "run_id": run_id,
        "status": "cancelled",
        "status_url": started["status_url"],
    }
    assert _http(f"{server.api_url}/runs/{run_id}/cancel", "POST")[:2] == (200, cancelled)
    assert pipeline.runtime.wait_for_execution(run_id)["status"] == "ABORTED"
    GATE.set()
    status, shown, _ = _http(started["status_url"], "GET")
    assert shown["run"]["status"] == "cancelled"


def test_a_caller_over_its_quota_gets_429_with_retry_after_over_http(monkeypatch: pytest.MonkeyPatch) -> None:
    """The quota is the API handler's, so `toolpipe serve` answers it as API Gateway would pass it on."""
    for pipeline, server in gated_server(monkeypatch, HELD, {"TOOLPIPE_QUOTA_RUNNING": "1"}):
        pipeline.script(Reply(tool_calls=[call("wait_for_gate", label="a")]), Reply(content="done"))
        assert _http(f"{server.api_url}/runs", "POST", {"input": "wait", "agent": "held"})[0] == 202
        status, refused, headers = _http(f"{server.api_url}/runs", "POST", {"input": "x", "agent": "held"})
        assert status == 429 and headers["Retry-After"] == "10"
        assert headers["Content-Type"].startswith("application/json")
        assert refused["message"].startswith("quota exceeded: at most 1 runs running at once")
