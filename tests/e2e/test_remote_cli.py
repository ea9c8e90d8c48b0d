"""`toolpipe run/show --api URL` (issue 10, item 3): the CLI against a deployed runs API, through
the same client as the local server's, signing with SigV4 or sending an API key."""

import io
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.conftest import _pipeline
from toolpipe.infra.cli import main
from toolpipe.infra.cli.remote import RemoteSession, api_region
from toolpipe.infra.local.client import Client, http_url
from toolpipe.infra.local.server import LocalServer

# What tests/conftest.py puts in the environment: the default chain finds these.
CREDENTIALS = Credentials("testing", "testing", "testing")
REGION = "us-east-1"
RUN_ID = "0123456789abcdef0123456789abcdef"
RUN = {
    "run_id": RUN_ID,
    "agent": "assistant",
    "status": "succeeded",
    "created_at": "2026-11-22T18:00:00+00:00",
    "usage": {"model_calls": 1, "prompt_tokens": 10, "completion_tokens": 2},
    "cost_usd": 0.0,
    "error": None,
}


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeApi:
    """A tiny HTTP server standing in for API Gateway: it keeps each request and, like API
    Gateway with IAM auth, recomputes its SigV4 signature with botocore from what arrived."""

    url: str
    received: list[Received] = field(default_factory=list)

    def signature_is_valid(self, request: Received) -> bool:
        authorization = request.headers["Authorization"]
        fields = dict(part.strip().split("=", 1) for part in authorization.split(" ", 1)[1].split(","))
        signed = fields["SignedHeaders"].split(";")
        headers = {name: value for name, value in request.headers.items() if name.lower() in signed}
        aws = AWSRequest(
            method=request.method, url=f"{self.url}{request.path}", data=request.body, headers=headers
        )
        aws.context["timestamp"] = request.headers["X-Amz-Date"]
        signer = SigV4Auth(CREDENTIALS, "execute-api", REGION)
        expected = signer.signature(signer.string_to_sign(aws, signer.canonical_request(aws)), aws)
        scope = (
            f"{CREDENTIALS.access_key}/{request.headers['X-Amz-Date'][:8]}/{REGION}/execute-api/aws4_request"
        )
        return fields["Signature"] == expected and fields["Credential"] == scope and "host" in signed


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    api: FakeApi

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            api.received.append(Received(self.command, self.path, dict(self.headers.items()), body))
            path = self.path.split("?")[0]
            if path.endswith("/messages"):
                answer: dict[str, Any] = {"messages": [], "next": None}
            elif path == f"/v1/runs/{RUN_ID}":
                answer = {"run": RUN, "executions": [], "executions_next": None}
            else:
                answer = {"ok": True}
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    api = FakeApi(http_url(server.server_address))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()


def test_requests_carry_a_sigv4_signature_that_botocore_verifies(fake_api: FakeApi) -> None:
    session = RemoteSession(f"{fake_api.url}/v1/")
    assert session.request("POST", "/runs", {"input": "What is 2+3?"})[0] == 200
    assert session.request("GET", f"/runs/{RUN_ID}/messages?after=2&limit=5")[0] == 200
    post, get = fake_api.received
    assert (post.method, post.path, get.path) == (
        "POST",
        "/v1/runs",
        f"/v1/runs/{RUN_ID}/messages?after=2&limit=5",
    )
    assert post.headers["Authorization"].startswith("AWS4-HMAC-SHA256 ")
    assert post.headers["X-Amz-Security-Token"] == "testing"
    assert fake_api.signature_is_valid(post) and fake_api.signature_is_valid(get)
    # The body is signed: a request changed on the way fails the check.
    tampered = Received(post.method, post.path, post.headers, b'{"input": "rm -rf"}')
    assert not fake_api.signature_is_valid(tampered)


def test_an_api_key_is_sent_as_x_api_key_and_nothing_is_signed(fake_api: FakeApi) -> None:
    out = io.StringIO()
    code = main(["show", RUN_ID, "--api", f"{fake_api.url}/v1", "--api-key", "k-123"], out=out)
    assert code == 0, out.getvalue()
    assert f"run {RUN_ID} · agent assistant · succeeded" in out.getvalue()
    assert fake_api.received and all(r.headers.get("x-api-key") == "k-123" for r in fake_api.received)
    assert not any("Authorization" in r.headers for r in fake_api.received)


def test_the_region_comes_from_an_execute_api_url() -> None:
    assert api_region("https://a1b2c3d4e5.execute-api.eu-west-3.amazonaws.com/v1/") == "eu-west-3"
    assert api_region("https://agents.example.com/v1") is None
    client = Client.for_api("https://a1b2c3d4e5.execute-api.eu-west-3.amazonaws.com/v1/", None)
    assert client.url == "https://a1b2c3d4e5.execute-api.eu-west-3.amazonaws.com"


def test_model_and_api_key_without_api_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "hi", "--api", "https://x.execute-api.us-east-1.amazonaws.com/v1", "--model", "m"])
    assert exited.value.code == 2 and "--model applies to the local server" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["show", RUN_ID, "--api-key", "k"])
    assert (
        exited.value.code == 2
        and "--api-key (or TOOLPIPE_API_KEY) goes with --api" in capsys.readouterr().err
    )


def test_run_and_show_against_an_api_url_poll_it_to_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local server stands in for the deployed API (it does not check signatures; the fake
    above does): `run --api` has no event stream there and reads the run by polling."""
    for pipeline in _pipeline():
        with LocalServer(pipeline.runtime) as server:
            out, err = io.StringIO(), io.StringIO()
            code = main(
                ["run", "What is 2+3?", "--agent", "assistant", "--api", f"{server.api_url}/"],
                out=out,
                err=err,
            )
            assert code == 0, out.getvalue() + err.getvalue()
            lines = out.getvalue().splitlines()
            run_id = lines[0].split()[1]
            # The same lines as from the local event stream, each item once, in order.
            assert lines == [
                f"run {run_id} (agent assistant)",
                "user: What is 2+3?",
                "model (turn 1): 1 tool call(s)",
                '  call sum({"a": 2.0, "b": 3.0})',
                lines[4],
                "answer: 2 + 3 = 5.0.",
                lines[6],
            ]
            assert err.getvalue().startswith("model endpoint: the deployed stack's")
            assert lines[4].startswith("  -> sum: 5.0") and lines[6].startswith("status: succeeded")

            monkeypatch.setenv("TOOLPIPE_API_URL", server.api_url)  # the environment, not the flag
            shown = io.StringIO()
            assert main(["show", run_id], out=shown, err=io.StringIO()) == 0, shown.getvalue()
            assert f"run {run_id} · agent assistant · succeeded" in shown.getvalue()
