"""`toolpipe serve` and its clients as a user runs them: real processes, real HTTP on 127.0.0.1."""

import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.cli import discovery
from toolpipe.infra.cli.discovery import discover, read_server_file, server_file
from toolpipe.infra.local.client import Client
from toolpipe.infra.local.runtime import LocalRuntime

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "What is 2+3 and the square root of 16?"  # the demo model answers it with two parallel calls


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    return {**env, "TOOLPIPE_HOME": str(home), "PYTHONPATH": str(ROOT)}


def _toolpipe(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolpipe.infra.cli", *args],
        env=_env(home),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class Served:
    """A `toolpipe serve` process, its URL once it said it is ready."""

    def __init__(self, home: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.home = home
        started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "toolpipe.infra.cli", "serve", "--port", "0", *args],
            # faulthandler: a server that does not stop is made to print its threads (`stop`).
            env={**_env(home), "PYTHONFAULTHANDLER": "1", **(env or {})},
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.process.stdout is not None
        self.lines: list[str] = []
        for line in self.process.stdout:  # blocks until the server prints, or exits
            self.lines.append(line)
            if line.startswith("toolpipe server at "):
                break
        else:
            raise AssertionError(f"serve exited {self.process.wait()}: {''.join(self.lines)}")
        self.ready_seconds = time.monotonic() - started
        self.api_url = self.lines[-1].split()[3]
        self.url = self.api_url.removesuffix("/v1")

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        self.process.send_signal(sig)
        try:
            out, _ = self.process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            # Where each of its threads is, for whoever reads the failure: a hung Ctrl-C was
            # a deadlock in the signal handler, found only by looking at the live process.
            self.process.send_signal(signal.SIGABRT)
            out, _ = self.process.communicate(timeout=30)
            raise AssertionError(
                f"serve did not stop within 60 s of signal {sig}; its threads:\n{out}"
            ) from None
        return self.process.returncode, "".join(self.lines) + out


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = Served(tmp_path_factory.mktemp("serve"))
    yield server
    code, output = server.stop()
    assert code == 0, output


def _http(
    url: str, method: str, path: str, body: bytes | None = None, **headers: str
) -> tuple[int, Any, Any]:
    parts = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(parts[0], int(parts[1]), timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None, response.headers
    finally:
        connection.close()


def test_serve_is_ready_fast_and_discoverable(served: Served) -> None:
    info = read_server_file(served.home)
    assert info is not None and info.url == served.url and info.pid == served.process.pid
    assert discover(served.home) == info
    # Where a file or an event starts a run (docs/concepts/triggers.md).
    assert {
        "S3 trigger: s3://toolpipe-local-inputs/inbox/\n",
        "EventBridge bus: toolpipe-local-events\n",
    } <= set(served.lines)
    print(f"serve ready in {served.ready_seconds:.2f} s")  # measured figure, see the report
    assert served.ready_seconds < 15  # a bound for a loaded CI machine; the figure is printed


def test_second_serve_for_the_same_folder_says_so_and_exits_2(served: Served) -> None:
    second = _toolpipe(served.home, "serve", "--port", "0", timeout=30)

    assert second.returncode == 2 and second.stdout == ""
    assert second.stderr == f"toolpipe: state folder {served.home}\n" + (
        f"toolpipe: error: a toolpipe server at {served.url} is already serving {served.home}\n"
    )


def test_a_burst_of_connections_is_served_not_reset(served: Served) -> None:
    # Sixty clients connect at the same instant: each is answered (the listen backlog was 5).
    start = threading.Barrier(60)

    def health(_: int) -> int:
        start.wait(10)
        with urllib.request.urlopen(f"{served.url}/_local/health", timeout=60) as answer:
            return int(answer.status)

    with concurrent.futures.ThreadPoolExecutor(60) as pool:
        assert list(pool.map(health, range(60))) == [200] * 60


def test_twenty_concurrent_cli_runs_share_the_server_and_all_are_readable(served: Served) -> None:
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        runs = list(pool.map(lambda _: _toolpipe(served.home, "run", PROMPT), range(20)))
    for result in runs:
        assert result.returncode == 0, result.stdout + result.stderr
        assert "status: succeeded" in result.stdout
    run_ids = [r.stdout.removeprefix("run ").split()[0] for r in runs]
    assert len(set(run_ids)) == 20
    # Printed from the event stream in slot order: both results before the answer, once each.
    for result in runs:
        lines = result.stdout.splitlines()
        assert sum(line.startswith("  -> ") for line in lines) == 2
        assert lines.index(next(line for line in lines if line.startswith("answer:"))) > max(
            i for i, line in enumerate(lines) if line.startswith("  -> ")
        )

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        shown = list(pool.map(lambda run_id: _toolpipe(served.home, "show", run_id, "--json"), run_ids))
    for run_id, result in zip(run_ids, shown, strict=True):
        assert result.returncode == 0, result.stdout
        body = json.loads(result.stdout)
        assert body["run"]["run_id"] == run_id and body["run"]["status"] == "succeeded"
        assert [m["kind"] for m in body["messages"]] == [
            "user",
            "assistant",
            "tool_result",
            "tool_result",
            "assistant",
        ]


def test_callers_never_see_each_others_runs_under_concurrency(served: Served) -> None:
    """Requests handled at once must each keep their own identity (the resolver's event is global)."""
    client = Client(served.url)

    def start_and_read(i: int) -> tuple[str, int, int]:
        caller = f"arn:aws:iam::000000000000:user/u{i}"
        status, body = Client(served.url, caller=caller).request("POST", "/runs", {"prompt": PROMPT})
        assert status == 202, body
        run_id = body["run_id"]
        mine, _ = Client(served.url, caller=caller).request("GET", f"/runs/{run_id}")
        theirs, _ = client.request("GET", f"/runs/{run_id}")  # the default local caller
        return run_id, mine, theirs

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        results = list(pool.map(start_and_read, range(12)))
    assert [(mine, theirs) for _, mine, theirs in results] == [(200, 404)] * 12
    # No identity at all: the API's 403, as for an unsigned request on AWS.
    status, body = Client(served.url, caller="").request("GET", f"/runs/{results[0][0]}")
    assert status == 403, body


def test_http_answers_as_the_api_function_does(tmp_path: Path) -> None:
    served = Served(tmp_path)
    try:
        status, started, headers = _http(
            served.url,
            "POST",
            "/v1/runs",
            json.dumps({"prompt": PROMPT}).encode(),
            **{"Content-Type": "application/json"},
        )
        assert status == 202 and headers["Content-Type"] == "application/json"
        run_id = started["run_id"]
        for event, data in Client(served.url).events(run_id, timeout=60):
            if event == "end":
                assert data["status"] == "succeeded"
        requests = [
            ("GET", f"/runs/{run_id}", None),
            ("GET", f"/runs/{run_id}/messages?limit=2", None),
            ("GET", f"/runs/{run_id}/messages?after=2&limit=2", None),
            ("GET", f"/runs/{run_id}/messages/3", None),
            ("POST", "/runs", '{"prompt": "  "}'),  # 400: blank
            ("POST", "/runs", '{"prompt": "x", "caller": "arn:aws:iam::1:user/eve"}'),  # 400
            ("GET", f"/runs/{run_id}/messages?limit=0", None),  # 400: a query parameter
            ("GET", "/runs/not-a-run", None),  # 404
            ("GET", f"/runs/{run_id}/messages/99", None),  # 404
        ]
        over_http = [
            _http(served.url, method, f"/v1{path}", None if body is None else body.encode())[:2]
            for method, path, body in requests
        ]
    finally:
        code, output = served.stop()
    assert code == 0, output

    # The same requests as events straight to the handler, on the state the server saved.
    with LocalRuntime(state_dir=tmp_path, workers=0) as runtime:
        direct = [runtime.api(method, path, body) for method, path, body in requests]
        again = runtime.api("POST", "/runs", {"prompt": PROMPT})
    # A run's cost settles a moment after its end (its execution's transitions, its last
    # invocations' counts): the first read may come before, the direct one after.
    http_cost, direct_cost = over_http[0][1].pop("cost"), direct[0][1].pop("cost")
    assert http_cost["operations"]["dynamodb_requests"] <= direct_cost["operations"]["dynamodb_requests"]
    assert over_http == direct
    assert [status for status, _ in over_http] == [200, 200, 200, 200, 400, 400, 400, 404, 404]
    # The status URL is absolute, from the Host the request came to (the direct event has none).
    assert started.pop("status_url") == f"{served.url}/v1/runs/{run_id}"
    assert again[1].pop("status_url") == f"/runs/{again[1]['run_id']}"
    # Each names its own default agent: the served app's first, and this process's.
    assert started.pop("agent") == "assistant" and again[1].pop("agent")
    assert started == json.loads(json.dumps(again[1]).replace(again[1]["run_id"], run_id))


def test_routes_the_deployed_api_has_not(served: Served) -> None:
    # The API's ErrorBody, as the stack's gateway responses answer it.
    missing = {"statusCode": 403, "message": "Missing Authentication Token"}
    assert _http(served.url, "PUT", "/v1/runs/x")[:2] == (403, missing)
    assert _http(served.url, "GET", "/v1/nothing")[:2] == (403, missing)
    assert _http(served.url, "GET", "/runs")[:2] == (
        404,
        {"statusCode": 404, "message": "not found: the API is under /v1, e.g. /v1/runs"},
    )
    status, body, _ = _http(served.url, "POST", "/v1/runs", b"\xff\xfe{", **{"Content-Length": "3"})
    assert status == 400 and body["message"].startswith("invalid run request")


def _raw(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """One request written to the socket as is (a verb http.client would refuse to send, a bad
    request line), read back until the server closes the connection."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(request)
        data = b""
        while chunk := connection.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize(
    "method",
    ["TRACE", "CONNECT", "PROPFIND", "MKCOL", "get", "Post", "FOO", "OPTIONS", "PUT", "PATCH", "HEAD"],
)
def test_a_method_the_api_has_not_is_a_403_in_json_as_api_gateway_answers(
    served: Served, method: str
) -> None:
    for path in ("/v1/runs", "/v1/runs/r1", "/v1/approvals", "/v1/openapi.json", "/v1/nothing", "/v1"):
        request = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        status, headers, body = _raw(served.url, request.encode())

        assert (status, headers["content-type"]) == (403, "application/json"), (method, path, body)
        if method != "HEAD":
            assert json.loads(body) == {"statusCode": 403, "message": "Missing Authentication Token"}


def test_a_request_line_the_server_cannot_read_is_answered_in_json(served: Served) -> None:
    for request in (b"GET\r\n\r\n", b"GET /v1/runs HTTP/9.9\r\n\r\n", b"GET /v1/runs HTTP/1.1 extra\r\n\r\n"):
        status, headers, body = _raw(served.url, request)

        assert 400 <= status < 600 and status != 501, request
        assert headers["content-type"] == "application/json" and "message" in json.loads(body), body


def test_sigterm_drains_a_run_in_progress_saves_and_exits_0(tmp_path: Path) -> None:
    served = Served(tmp_path)
    status, body = Client(served.url).request("POST", "/runs", {"prompt": PROMPT})
    assert status == 202, body

    code, output = served.stop(signal.SIGTERM)

    assert code == 0, output
    assert output.endswith(f"stopped; state saved in {tmp_path}\n")
    assert not server_file(tmp_path).exists()
    shown = _toolpipe(tmp_path, "show", body["run_id"], "--json")  # reads the saved state
    assert shown.returncode == 0, shown.stdout
    assert json.loads(shown.stdout)["run"]["status"] == "succeeded"


def test_a_stale_server_file_is_replaced_and_ctrl_c_removes_it(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    server_file(tmp_path).write_text(
        json.dumps({"url": "http://127.0.0.1:9", "pid": int(dead.stdout), "started": "x"})
    )
    assert discover(tmp_path) is None

    served = Served(tmp_path)
    try:
        info = read_server_file(tmp_path)
        assert info is not None and info.pid == served.process.pid
    finally:
        code, output = served.stop(signal.SIGINT)
    assert code == 0, output
    assert not server_file(tmp_path).exists()


def test_two_concurrent_runs_with_no_server_share_one_and_neither_is_lost(tmp_path: Path) -> None:
    """The bug this server fixes: each `run` used to save its own state, and the last one won."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: _toolpipe(tmp_path, "run", PROMPT), range(2)))
    for result in runs:
        assert result.returncode == 0, result.stdout + result.stderr
    # The server one of them started stops on its own once idle, and saves.
    deadline = time.monotonic() + 60
    while server_file(tmp_path).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not server_file(tmp_path).exists()
    log = (tmp_path / "toolpipe.log").read_text()
    # One server served both: one became ready. The other command's server, started at the same
    # moment, found the folder taken and said so ("a toolpipe server at ... is already serving").
    ready = [line for line in log.splitlines() if line.startswith("toolpipe server at ")]
    assert len(ready) == 1, log

    run_ids = [result.stdout.removeprefix("run ").split()[0] for result in runs]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        shown = list(pool.map(lambda run_id: _toolpipe(tmp_path, "show", run_id), run_ids))
    for run_id, result in zip(run_ids, shown, strict=True):
        assert result.returncode == 0, result.stdout
        assert f"run {run_id} · agent assistant · succeeded" in result.stdout


def test_a_run_on_a_server_that_runs_already_does_not_import_the_app(served: Served) -> None:
    """That server names the run's agent and says what is wrong with the app itself: the command
    leaves the app alone (importing it was a third of the command's CPU)."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "toolpipe.infra.cli", "run", PROMPT],
        env=_env(served.home),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The interpreter's lines and the command's own share stderr, not always a line each.
    imported = set(re.findall(r"import time:\s+\d+ \|\s+\d+ \| +([\w.]+)", result.stderr))
    assert "toolpipe.infra.cli.session" in imported  # the lines are read
    assert not {"assistant", "assistant.agents", "toolpipe.shared.agents"} & imported
    assert " (agent assistant)\n" in result.stdout


def test_a_server_a_command_started_stops_once_that_command_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command releases it as it closes: the server stops without waiting out its idle exit,
    here a minute, and the command's wait for it ends."""
    monkeypatch.setattr(discovery, "AUTO_IDLE_SECONDS", 60.0)
    connection = discovery.connect(tmp_path, env=_env(tmp_path))
    assert connection.child is not None
    assert connection.client.request("GET", "/runs")[0] == 200
    connection.close(wait=30)
    assert connection.child.poll() == 0
    assert not server_file(tmp_path).exists()


def test_a_template_aws_would_refuse_is_one_line_from_run_at_once(tmp_path: Path) -> None:
    """The server a `run` starts refuses the template (its stage logs, and it sets no API Gateway
    CloudWatch role, which a new account lacks): `run` says why in one line, without waiting
    for a server that never comes."""
    from toolpipe.infra.local.account import AWS_MESSAGE
    from toolpipe.infra.local.template import PACKAGED

    data = json.loads(PACKAGED.read_text())
    for name in [n for n, r in data["Resources"].items() if r["Type"] == "AWS::ApiGateway::Account"]:
        del data["Resources"][name]
    refused = tmp_path / "refused.template.json"
    refused.write_text(json.dumps(data))
    started = time.monotonic()
    ran = subprocess.run(
        [sys.executable, "-m", "toolpipe.infra.cli", "run", PROMPT],
        env={**_env(tmp_path / "home"), "TOOLPIPE_TEMPLATE": str(refused)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert time.monotonic() - started < 30  # not the 60 s wait for a server
    assert ran.returncode != 0 and ran.stdout == ""
    errors = [line for line in ran.stderr.splitlines() if line.startswith("toolpipe: error: ")]
    assert errors == [ran.stderr.splitlines()[-1]], ran.stderr
    assert AWS_MESSAGE in errors[0] and "api_gateway_cloudwatch_role=true" in errors[0]
    assert "Traceback" not in ran.stderr
