"""The signed approval link end to end on the local server, over real HTTP as a browser uses it
(issue 9, items 4 to 6): `ApprovalRequested` carries the link, the example's `send_email` is
approved from the page (sent once) or approved with edited arguments (sent with those, the
model told), and a link stays valid after the local runtime restarts."""

import html
import http.client
import json
import re
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Pipeline, _pipeline, call
from tests.e2e.test_approvals import GATED, _sent_emails, pending, tool_messages
from toolpipe.infra.cli.output import approval_line
from toolpipe.infra.local.api_proxy import proxy_event
from toolpipe.infra.local.runtime import LocalRuntime
from toolpipe.infra.local.scripted_model import Reply, ScriptedModelServer, ScriptResponder
from toolpipe.infra.local.server import LocalServer
from toolpipe.shared.agents import AGENTS


@pytest.fixture
def served() -> Iterator[tuple[Pipeline, LocalServer]]:
    for pipeline in _pipeline():
        with LocalServer(pipeline.runtime) as server:
            yield pipeline, server


@pytest.fixture
def served_with_link_edits() -> Iterator[tuple[Pipeline, LocalServer]]:
    """The local server of a stack deployed with `-c link_edits=true`."""
    for pipeline in _pipeline({"TOOLPIPE_LINK_EDITS": "true"}):
        with LocalServer(pipeline.runtime) as server:
            yield pipeline, server


def _http(
    url: str, method: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, str, http.client.HTTPMessage]:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read().decode(), response.headers
    finally:
        connection.close()


def _link(server: LocalServer) -> dict[str, Any]:
    """The one pending approval as its requester lists it over HTTP, with its signed link."""
    deadline = time.monotonic() + 20
    while True:
        status, text, _ = _http(f"{server.api_url}/approvals?status=pending", "GET")
        assert status == 200, text
        approvals = json.loads(text)["approvals"]
        if approvals:
            [approval] = approvals
            return dict(approval)
        assert time.monotonic() < deadline, "no call waits for approval"
        time.sleep(0.05)


def _decide_in_browser(url: str, action: str, **fields: str) -> tuple[int, str]:
    """Open the link, keep the cookie it sets, post the form as a browser would."""
    status, page, headers = _http(url, "GET")
    assert status == 200, page
    cookie = headers["Set-Cookie"].split(";", 1)[0]
    form = {
        name: html.unescape(value)
        for name, value in re.findall(r'name="(exp|kid|sig|csrf)" value="([^"]*)"', page)[:4]
    }
    form |= {"action": action, **fields}
    parts = urllib.parse.urlsplit(url)
    status, answer, _ = _http(
        url,
        "POST",
        urllib.parse.urlencode(form).encode(),
        {
            "Content-Type": "application/x-www-form-urlencoded",
            "Cookie": cookie,
            "Origin": f"{parts.scheme}://{parts.netloc}",
        },
    )
    return status, answer


def _h1(page: str) -> str:
    match = re.search(r"<h1[^>]*>(.*?)</h1>", page, re.S)
    assert match, page
    return html.unescape(re.sub(r"<[^>]+>", "", match.group(1)))


def test_the_example_email_is_sent_once_when_approved_from_the_page(
    served: tuple[Pipeline, LocalServer],
) -> None:
    pipeline, server = served
    runtime = pipeline.runtime
    queue = runtime.sqs.create_queue(QueueName="approval-requests")["QueueUrl"]
    arn = runtime.sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    runtime.events.put_rule(
        Name="approvals",
        EventBusName=runtime.event_bus_name,
        EventPattern=json.dumps({"source": ["toolpipe"], "detail-type": ["ApprovalRequested"]}),
    )
    runtime.events.put_targets(
        Rule="approvals", EventBusName=runtime.event_bus_name, Targets=[{"Id": "q", "Arn": arn}]
    )
    email = call("send_email", to="ana@example.com", subject="Report", body="The report is ready.")
    pipeline.script(Reply(tool_calls=[email]), Reply(content="Sent."))
    run_id = pipeline.start("Email Ana", agent="assistant")
    approval = _link(server)
    url = approval["callback_url"]
    assert url.startswith(f"{server.api_url}/approvals/{approval['approval_id']}/page?exp=")
    # What `toolpipe run` prints while it waits: the link, on a line that says "approve".
    [link_line] = [line for line in approval_line(approval).splitlines() if url in line]
    assert "approve" in link_line

    # The event carries the same link, never the task token.
    deadline = time.monotonic() + 10
    received: list[dict[str, Any]] = []
    while not received and time.monotonic() < deadline:  # published just after the record is stored
        received = runtime.sqs.receive_message(QueueUrl=queue).get("Messages", [])
        time.sleep(0.05)
    [message] = received
    detail = json.loads(message["Body"])["detail"]
    assert detail["callback_url"] == url and "token" not in json.dumps(detail).lower()

    for _ in range(5):  # a mail scanner opening the link sends nothing
        assert _http(url, "GET")[0] == 200 and _http(url, "HEAD")[0] == 200
    assert _sent_emails() == []
    status, answer = _decide_in_browser(url, "approve")
    assert (status, _h1(answer)) == (200, "Approved")
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    assert _sent_emails() == [(["ana@example.com"], "Report")]
    # The link is single use: the page now shows the decision and offers no form.
    status, page, _ = _http(url, "GET")
    assert status == 200 and "<form" not in page
    assert "signed link holder, not authenticated (127.0.0.1)" in page
    assert _sent_emails() == [(["ana@example.com"], "Report")]


def test_a_link_cannot_edit_the_example_email_but_an_authenticated_approver_can(
    served: tuple[Pipeline, LocalServer],
) -> None:
    pipeline, server = served
    email = call("send_email", to="ana@example.com", subject="Report", body="The report is ready.")
    pipeline.script(Reply(tool_calls=[email]), Reply(content="Sent."))
    run_id = pipeline.start("Email Ana", agent="assistant")
    approval = _link(server)
    url = approval["callback_url"]
    edited = {"to": "eve@example.com", "subject": "Report", "body": "The report is ready."}
    status, refused = _decide_in_browser(url, "edit", arguments=json.dumps(edited))
    assert status == 403 and _h1(refused).startswith(
        "Not decided: editing the arguments needs an authenticated"
    )
    status, text, _ = _http(
        f"{server.api_url}/approvals/{approval['approval_id']}/approve",
        "POST",
        json.dumps({"arguments": edited | {"to": "bea@example.com"}}).encode(),
        {"Content-Type": "application/json"},
    )
    assert status == 200, text
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    assert _sent_emails() == [(["bea@example.com"], "Report")]
    status, text, _ = _http(f"{server.api_url}/approvals/{approval['approval_id']}", "GET")
    record = json.loads(text)
    assert record["decided_by_authenticated"] is True and record["decided_by"].startswith("arn:aws:")


def test_the_example_email_goes_with_the_edited_arguments_and_the_model_is_told(
    served_with_link_edits: tuple[Pipeline, LocalServer],
) -> None:
    pipeline, server = served_with_link_edits
    email = call("send_email", to="ana@example.com", subject="Report", body="The report is ready.")
    pipeline.script(Reply(tool_calls=[email]), Reply(content="Sent."))
    run_id = pipeline.start("Email Ana", agent="assistant")
    url = _link(server)["callback_url"]
    status, refused = _decide_in_browser(url, "edit", arguments='{"to": "bea@example.com"}')
    assert status == 400 and _h1(refused).startswith("Not decided: Invalid arguments for 'send_email'")
    edited = {"to": "bea@example.com", "subject": "Report (final)", "body": "The final report is ready."}
    status, answer = _decide_in_browser(url, "edit", arguments=json.dumps(edited))
    assert (status, _h1(answer)) == (200, "Approved with edited arguments")
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"

    assert _sent_emails() == [(["bea@example.com"], "Report (final)")]
    [told] = tool_messages(pipeline, 1)
    first, rest = told.split("\n", 1)
    assert first == (
        "Note: a person changed the arguments before approving; the call used "
        + json.dumps(edited, sort_keys=True, separators=(",", ":"))
    )
    assert rest.startswith("Email sent to bea@example.com")


def test_a_link_stays_valid_after_the_local_runtime_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(AGENTS, GATED.name, GATED)
    with ScriptedModelServer(ScriptResponder([])) as model:
        env = {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "scripted"}
        model.responder = ScriptResponder(
            [Reply(tool_calls=[call("wire_money", to="ana", amount=5)]), Reply(content="Sent.")]
        )
        with LocalRuntime(state_dir=tmp_path, extra_env=env) as runtime:
            runtime.drain_seconds = 0.5
            _, started = runtime.api("POST", "/runs", {"input": "pay ana", "agent": "gated"})
            approval_id = pending(Pipeline(runtime, model))["approval_id"]
            link = _page(f"/approvals/{approval_id}", "GET", "")
            path, query = urllib.parse.urlsplit(json.loads(link["body"])["callback_url"])[2:4]
            assert _page(path.removeprefix("/v1"), "GET", query)["statusCode"] == 200
        assert (tmp_path / "approval-signing-key").stat().st_mode & 0o777 == 0o600
        with LocalRuntime(state_dir=tmp_path, extra_env=env) as runtime:
            pending(Pipeline(runtime, model))
            page = _page(path.removeprefix("/v1"), "GET", query)
            assert page["statusCode"] == 200, page["body"]
            assert _page(path.removeprefix("/v1"), "GET", query.replace("sig=", "sig=A"))["statusCode"] == 403
            runtime.api("POST", f"/approvals/{approval_id}/approve")
            runtime.wait_for_execution(started["run_id"], 30)


def _page(path: str, method: str, query: str) -> dict[str, Any]:
    from toolpipe.infra.cdk.functions import API
    from toolpipe.infra.local import lambdas
    from toolpipe.infra.local.runtime import LOCAL_CALLER

    event = proxy_event(method, path, query, [("Host", "127.0.0.1:9")], b"", LOCAL_CALLER)
    return dict(lambdas.call_function(API, event))
