"""The signed approval link and its page, through the real API handler on moto (issue 9,
items 4 and 5): what a person sees, what a forger, a mail scanner or another site cannot do,
and arguments a person edits before approving."""

import html
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import CALLS, Pipeline, _pipeline, call
from tests.e2e.test_approvals import GATED, pending, tool_messages
from tests.functional.test_approvals import _items
from toolpipe.infra.cdk.functions import API
from toolpipe.infra.local import lambdas, serial
from toolpipe.infra.local.api_proxy import proxy_event
from toolpipe.infra.local.runtime import LOCAL_CALLER
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS
from toolpipe.shared.deferred.hashing import arguments_hash
from toolpipe.shared.deferred.links import ApprovalLinks, StaticSigningKey
from toolpipe.shared.deferred.models import Approval, ApprovalStatus, DeliveryFailedError

HOST = "approvals.example.test"
PERSON_IP = "198.51.100.7"


@pytest.fixture(autouse=True)
def gated_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(AGENTS, GATED.name, GATED)


@pytest.fixture
def edits_pipeline() -> Iterator[Pipeline]:
    """A runtime whose links may also edit the arguments (the stack's `-c link_edits=true`)."""
    yield from _pipeline({"TOOLPIPE_LINK_EDITS": "true"})


def by_link(ip: str = PERSON_IP) -> str:
    """`decided_by` of a decision made on the page: whoever held the link, from where."""
    return f"signed link holder, not authenticated ({ip})"


class Page:
    """One HTTP exchange with the page, as API Gateway hands it to the function."""

    def __init__(self, status: int, headers: dict[str, list[str]], body: str) -> None:
        self.status, self.headers, self.body = status, headers, body

    def header(self, name: str) -> str:
        return self.headers[name.lower()][-1]

    def h1(self) -> str:
        match = re.search(r"<h1[^>]*>(.*?)</h1>", self.body, re.S)
        assert match, self.body
        return html.unescape(re.sub(r"<[^>]+>", "", match.group(1)))

    def field(self, name: str) -> str:
        match = re.search(rf'name="{name}" value="([^"]*)"', self.body)
        assert match, self.body
        return html.unescape(match.group(1))


def exchange(
    method: str, path: str, query: str = "", headers: list[tuple[str, str]] | None = None, body: bytes = b""
) -> Page:
    event = proxy_event(
        method, path, query, [("Host", HOST), *(headers or [])], body, None, source_ip=PERSON_IP
    )
    response = lambdas.call_function(API, event)
    merged: dict[str, list[str]] = {}
    for name, values in (response.get("multiValueHeaders") or {}).items():
        merged.setdefault(name.lower(), []).extend(str(v) for v in values)
    for name, value in (response.get("headers") or {}).items():
        merged.setdefault(name.lower(), [str(value)])
    return Page(int(response["statusCode"]), merged, str(response.get("body") or ""))


def link_of(approval_id: str) -> tuple[str, str]:
    """The approval's signed link as its requester reads it: (path under the stage, query)."""
    event = proxy_event("GET", f"/approvals/{approval_id}", "", [("Host", HOST)], b"", LOCAL_CALLER)
    body = json.loads(lambdas.call_function(API, event)["body"])
    url = urllib.parse.urlsplit(body["callback_url"])
    assert (url.scheme, url.netloc) == ("http", HOST)
    return url.path.removeprefix("/v1"), url.query


class Browser:
    """A person's browser on the page: keeps the CSRF cookie the GET set, posts the forms."""

    def __init__(self, path: str, query: str) -> None:
        self.path, self.query = path, query
        self.cookie = ""

    def open(self) -> Page:
        page = exchange("GET", self.path, self.query, self._cookie())
        for set_cookie in page.headers.get("set-cookie", []):
            self.cookie = set_cookie.split(";", 1)[0]
        return page

    def post(
        self, page: Page, action: str, headers: list[tuple[str, str]] | None = None, **fields: str
    ) -> Page:
        form = {
            "exp": page.field("exp"),
            "kid": page.field("kid"),
            "sig": page.field("sig"),
            "csrf": page.field("csrf"),
            "action": action,
        }
        form |= fields
        return exchange(
            "POST",
            self.path,
            self.query,
            [*self._cookie(), ("Content-Type", "application/x-www-form-urlencoded"), *(headers or [])],
            urllib.parse.urlencode(form).encode(),
        )

    def _cookie(self) -> list[tuple[str, str]]:
        return [("Cookie", self.cookie)] if self.cookie else []


def _waiting(pipeline: Pipeline, *calls: Any) -> tuple[str, list[dict[str, Any]]]:
    pipeline.script(Reply(tool_calls=list(calls)), Reply(content="Done."))
    run_id = pipeline.start("Pay Ana 250 euros for the March invoice <b>now</b>", agent="gated")
    approvals = _all_pending(pipeline, len(calls))
    return run_id, approvals


def _wire_money_page(pipeline: Pipeline) -> tuple[str, str, Browser, Page]:
    """A run whose wire of 250 to Ana waits for a person, and its approval page opened."""
    run_id, [approval] = _waiting(pipeline, call("wire_money", to="ana", amount=250))
    approval_id = approval["approval_id"]
    browser = Browser(*link_of(approval_id))
    return run_id, approval_id, browser, browser.open()


def _all_pending(pipeline: Pipeline, count: int) -> list[dict[str, Any]]:
    import time

    deadline = time.monotonic() + 20
    while True:
        approvals = pipeline.runtime.api("GET", "/approvals?status=pending")[1]["approvals"]
        if len(approvals) == count:
            return sorted(approvals, key=lambda a: a["seq"])
        assert time.monotonic() < deadline, approvals
        time.sleep(0.05)


def test_the_page_shows_the_whole_call_and_no_visit_decides(pipeline: Pipeline) -> None:
    note = "x" * 900 + "<script>alert(1)</script>"  # past the 500-character preview, and hostile
    run_id, [approval] = _waiting(pipeline, call("wire_money", to=note, amount=250))
    approval_id = approval["approval_id"]
    path, query = link_of(approval_id)
    assert path == f"/approvals/{approval_id}/page"
    assert re.fullmatch(r"exp=\d+&kid=[A-Za-z0-9_-]{8}&sig=[A-Za-z0-9_-]{43}", query)
    before = _items(pipeline, approval_id)

    browser = Browser(path, query)
    page = browser.open()
    assert page.status == 200 and page.header("content-type") == "text/html; charset=utf-8"
    assert page.h1() == "Approve wire_money?"
    [pre] = re.findall(r"<pre>(.*?)</pre>", page.body, re.S)
    assert json.loads(html.unescape(pre)) == {"to": note, "amount": 250}  # whole, not the preview
    assert "<script>" not in page.body and "&lt;script&gt;" in page.body
    assert "Pay Ana 250 euros for the March invoice &lt;b&gt;now&lt;/b&gt;" in page.body  # the request
    assert run_id in page.body and LOCAL_CALLER in page.body and "Send money." in page.body
    for button in ("Approve", "Deny"):
        assert f'<button type="submit">{button}</button>' in page.body
    assert '<label for="reason">Reason</label><textarea id="reason" name="reason"' in page.body
    # No editor: a link is not an authenticated person (link edits are off by default).
    assert "Approve with these arguments" not in page.body and 'name="arguments"' not in page.body
    assert f"toolpipe approve {approval_id} --arguments" in page.body
    assert page.header("cache-control") == "no-store"
    assert page.header("referrer-policy") == "same-origin"
    assert page.header("x-content-type-options") == "nosniff"
    csp = page.header("content-security-policy")
    assert "script-src" not in csp and "default-src 'none'" in csp
    assert "form-action 'self'" in csp and "frame-ancestors 'none'" in csp
    [cookie] = page.headers["set-cookie"]
    attributes = {a.strip().split("=")[0].lower(): a.strip() for a in cookie.split(";")[1:]}
    assert attributes.keys() >= {"httponly", "samesite", "path"} and "secure" not in attributes  # http here
    assert attributes["samesite"] == "SameSite=Strict" and attributes["path"] == f"Path=/v1{path}"
    assert "<script" not in page.body.lower().replace("&lt;script", "")  # no JavaScript of ours

    # A mail scanner, a link preview, a person reloading: GET and HEAD many times decide nothing.
    for _ in range(25):
        assert exchange("GET", path, query).status == 200
        head = exchange("HEAD", path, query)
        assert head.status == 200
    assert _items(pipeline, approval_id) == before
    assert CALLS.counts.get("wire_money") is None

    # The link works from the browser that opened it: the first decision.
    decided = browser.post(page, "approve")
    assert (decided.status, decided.h1()) == (200, "Approved")
    assert "<form" not in decided.body
    assert decided.body.count("wire_money") == 1  # its row, not a line above it too
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    record = pipeline.runtime.api("GET", f"/approvals/{approval_id}")[1]
    assert (record["status"], record["decided_by"]) == ("approved", by_link())
    assert record["decided_by_authenticated"] is False
    assert CALLS.counts["wire_money"] == 1

    # Single use: the page now says who decided and when, and offers nothing; a replayed POST is a 409.
    after = exchange("GET", path, query)
    assert after.status == 200 and "<form" not in after.body
    assert by_link() in after.body and record["decided_at"] in after.body
    again = browser.post(page, "deny", reason="changed my mind")
    assert again.status == 409 and again.h1().startswith("Already decided")
    assert pipeline.runtime.api("GET", f"/approvals/{approval_id}")[1]["status"] == "approved"
    assert CALLS.counts["wire_money"] == 1


def test_forged_tampered_and_borrowed_links_are_refused_and_change_nothing(pipeline: Pipeline) -> None:
    run_id, [first, second] = _waiting(
        pipeline, call("wire_money", to="ana", amount=250), call("wire_money", to="bob", amount=300)
    )
    path, query = link_of(first["approval_id"])
    other_path, other_query = link_of(second["approval_id"])
    exp, kid, sig = (v for _, v in urllib.parse.parse_qsl(query))
    flipped = ("A" if sig[0] != "A" else "B") + sig[1:]
    other_kid = ("A" if kid[0] != "A" else "B") + kid[1:]
    before = {a["approval_id"]: _items(pipeline, a["approval_id"]) for a in (first, second)}

    refused = [
        exchange("GET", path, f"exp={exp}&kid={kid}&sig={flipped}"),  # tampered signature
        exchange("GET", path, f"exp={exp}&sig={flipped}"),  # tampered, and no key id
        exchange("GET", path, f"exp={int(exp) + 3600}&kid={kid}&sig={sig}"),  # tampered expiry
        exchange("GET", path, f"exp={exp}&kid={other_kid}&sig={sig}"),  # a key id no key has
        exchange("GET", path, f"exp={exp}&kid={kid}A&sig={sig}"),  # a key id that is not one
        exchange("GET", path, f"exp={exp}&kid=..%2F..%2F&sig={sig}"),
        exchange("GET", path, f"exp={exp}&kid={kid}"),  # no signature
        exchange("GET", path, f"exp={exp}"),
        exchange("GET", path, ""),
        exchange("GET", path, other_query),  # the other approval's signature
        exchange("GET", other_path.replace(second["approval_id"], "0" * 32), other_query),  # unknown id
        exchange("GET", "/approvals/not-an-id/page", query),
    ]
    for page in refused:
        assert (page.status, page.h1()) == (403, "Link not valid"), page.body
        assert page.header("content-type") == "text/html; charset=utf-8"
        assert page.header("cache-control") == "no-store"
        assert "set-cookie" not in page.headers
    # A POST with a borrowed or tampered link is refused before anything else is looked at.
    browser = Browser(path, query)
    good = browser.open()
    forged = Browser(path, f"exp={exp}&sig={flipped}")
    forged.cookie = browser.cookie
    assert (
        exchange(
            "POST",
            path,
            f"exp={exp}&sig={flipped}",
            [("Cookie", browser.cookie)],
            urllib.parse.urlencode({"action": "approve", "csrf": good.field("csrf")}).encode(),
        ).status
        == 403
    )
    assert (
        exchange(
            "POST",
            path,
            other_query,
            [("Cookie", browser.cookie)],
            urllib.parse.urlencode({"action": "approve", "csrf": good.field("csrf")}).encode(),
        ).status
        == 403
    )
    for approval in (first, second):
        assert _items(pipeline, approval["approval_id"]) == before[approval["approval_id"]]
    for approval in (first, second):
        pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/deny", {"reason": "test over"})
    pipeline.finish(run_id)
    assert CALLS.counts.get("wire_money") is None


def test_a_post_without_the_csrf_pair_or_from_another_site_is_refused(pipeline: Pipeline) -> None:
    run_id, [approval] = _waiting(pipeline, call("wire_money", to="ana", amount=250))
    approval_id = approval["approval_id"]
    path, query = link_of(approval_id)
    browser = Browser(path, query)
    page = browser.open()
    other = Browser(path, query)
    other.open()  # another browser: its own cookie, so its own token
    before = _items(pipeline, approval_id)
    form = "application/x-www-form-urlencoded"

    def post(cookie: str | None, fields: dict[str, str], *extra: tuple[str, str]) -> Page:
        headers = [("Content-Type", form), *extra] + ([("Cookie", cookie)] if cookie else [])
        return exchange("POST", path, query, headers, urllib.parse.urlencode(fields).encode())

    token = page.field("csrf")
    refusals = {
        "no token": post(browser.cookie, {"action": "approve"}),
        "no cookie": post(None, {"action": "approve", "csrf": token}),
        "a token for another cookie": post(other.cookie, {"action": "approve", "csrf": token}),
        "a made-up cookie": post("toolpipe_csrf=" + "A" * 43, {"action": "approve", "csrf": token}),
        "a token that is not one": post(browser.cookie, {"action": "approve", "csrf": "é" * 43}),
        "another site": browser.post(page, "approve", [("Origin", "https://evil.example")]),
        "an opaque origin": browser.post(page, "approve", [("Origin", "null")]),
    }
    for why, answer in refusals.items():
        assert answer.status == 403, why
        assert answer.h1() == "Refused", why
    assert _items(pipeline, approval_id) == before
    # Its own origin is fine (a browser sends it with every form post).
    denied = browser.post(page, "deny", [("Origin", f"http://{HOST}")], reason="Not this month")
    assert (denied.status, denied.h1()) == (200, "Denied")
    pipeline.finish(run_id)
    assert CALLS.counts.get("wire_money") is None
    assert tool_messages(pipeline, 1) == [
        "Error: A person denied the call to 'wire_money'; it was not run. Their reason: Not this month"
    ]


def test_edited_arguments_that_fail_the_schema_decide_nothing_and_valid_ones_run_exactly(
    edits_pipeline: Pipeline,
) -> None:
    pipeline = edits_pipeline
    run_id, approval_id, browser, page = _wire_money_page(pipeline)
    assert '<label for="arguments">Arguments (JSON)</label><textarea id="arguments"' in page.body
    before = _items(pipeline, approval_id)

    for text, error in [
        ('{"to": "ana", "amount": "lots"}', "Invalid arguments for 'wire_money'"),
        ('{"to": "ana"}', "Invalid arguments for 'wire_money'"),
        ('{"to": "ana", "amount": 5, "memo": "x"}', "Invalid arguments for 'wire_money'"),
        ("[1, 2]", "the arguments must be a JSON object"),
        ("{not json", "the arguments are not valid JSON"),
        (json.dumps({"to": "a" * 70_000, "amount": 1}), "larger than 64 KiB"),
    ]:
        answer = browser.post(page, "edit", arguments=text)
        assert answer.status == 400, text
        assert answer.h1().startswith("Not decided: ") and error in answer.h1(), answer.h1()
        assert "\n" not in answer.h1()
        assert html.escape(text)[:200] in answer.body  # the person's text, to fix
    assert browser.post(page, "deny", reason="   ").status == 400  # a blank reason
    assert browser.post(page, "maybe").status == 400
    assert _items(pipeline, approval_id) == before

    approved = browser.post(page, "edit", arguments='{"amount": 25, "to": "ana"}')
    assert (approved.status, approved.h1()) == (200, "Approved with edited arguments")
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    assert CALLS.counts["wire_money"] == 1
    edited = '{"amount":25,"to":"ana"}'
    assert tool_messages(pipeline, 1) == [
        f"Note: a person changed the arguments before approving; the call used {edited}\nsent 25.0 to ana"
    ]
    record = pipeline.runtime.api("GET", f"/approvals/{approval_id}")[1]
    # The object they are, as `ApproveRequest.arguments` takes them (issue 35); hashed as stored.
    assert record["arguments"] == json.loads(edited) and record["arguments_sha256"] == arguments_hash(edited)
    assert record["requested_arguments_sha256"] == arguments_hash('{"to": "ana", "amount": 250}')
    gate = pipeline.runtime.dynamodb.get_item(
        TableName="toolpipe-local", Key={"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "GATE#000003"}}
    )["Item"]
    assert (gate["arguments"]["S"], gate["arguments_sha256"]["S"]) == (edited, arguments_hash(edited))
    assert (record["decided_by"], record["decided_by_authenticated"]) == (by_link(), False)
    # The link stays bound to the model's arguments: it still opens, on the decided page.
    assert "Arguments approved (edited)" in exchange("GET", browser.path, browser.query).body


def test_a_link_cannot_edit_the_arguments_unless_link_edits_are_on_and_the_api_can(
    pipeline: Pipeline,
) -> None:
    """Whoever holds a link (a forwarded mail, a shared inbox) approves or denies what the model
    asked, never something else: edits from the page are a 403 that decides nothing, however the
    form is made. An authenticated approver edits through the API, and is recorded."""
    run_id, approval_id, browser, page = _wire_money_page(pipeline)
    before = _items(pipeline, approval_id)
    origin = [("Origin", f"http://{HOST}")]
    for text in ('{"amount": 9000, "to": "eve"}', "{not json", '{"to": "ana", "amount": "lots"}', "[]"):
        refused = browser.post(page, "edit", origin, arguments=text)
        assert refused.status == 403, text
        assert refused.h1() == (
            "Not decided: editing the arguments needs an authenticated approver: approve or deny them "
            f"as they are here, or use toolpipe approve {approval_id} --arguments '{{…}}' (the "
            "authenticated API)"
        )
        assert "Approve with these arguments" not in refused.body
    assert _items(pipeline, approval_id) == before
    assert CALLS.counts.get("wire_money") is None

    status, body = pipeline.runtime.api(
        "POST", f"/approvals/{approval_id}/approve", {"arguments": {"to": "ana", "amount": 25}}
    )
    assert (status, body["status"]) == (200, "approved")
    pipeline.finish(run_id)
    assert tool_messages(pipeline, 1)[0].endswith('the call used {"amount":25,"to":"ana"}\nsent 25.0 to ana')
    record = pipeline.runtime.api("GET", f"/approvals/{approval_id}")[1]
    assert (record["decided_by"], record["decided_by_authenticated"]) == (LOCAL_CALLER, True)
    assert record["arguments"] == {"amount": 25, "to": "ana"}
    # The page, still open in the browser, now shows who decided: a principal, not the link.
    shown = exchange("GET", browser.path, browser.query)
    assert LOCAL_CALLER in shown.body and "Arguments approved (edited)" in shown.body


def test_the_json_api_approves_with_edited_arguments_checked_alike(pipeline: Pipeline) -> None:
    run_id, [approval] = _waiting(pipeline, call("wire_money", to="ana", amount=250))
    approve = f"/approvals/{approval['approval_id']}/approve"
    api = pipeline.runtime.api
    status, body = api("POST", approve, {"arguments": {"to": "ana", "amount": "lots"}})
    assert status == 400 and body["message"].startswith("invalid approve request: body.arguments: Invalid")
    assert api("POST", approve, {"arguments": [1]})[0] == 400
    assert api("POST", approve, {"arguments": {"to": "ana", "amount": 1}, "extra": 1})[0] == 400
    assert api("GET", f"/approvals/{approval['approval_id']}")[1]["status"] == "pending"
    status, body = api("POST", approve, {"arguments": {"to": "bea", "amount": 12.5}})
    assert (status, body["status"]) == (200, "approved")
    record = api("GET", f"/approvals/{approval['approval_id']}")[1]
    assert (record["decided_by"], record["decided_by_authenticated"]) == (LOCAL_CALLER, True)
    pipeline.finish(run_id)
    assert tool_messages(pipeline, 1)[0].endswith(
        'the call used {"amount":12.5,"to":"bea"}\nsent 12.5 to bea'
    )


def test_approve_and_deny_racing_through_the_page_take_one_decision_and_one_task_answer(
    pipeline: Pipeline,
) -> None:
    run_id, approval_id, browser, page = _wire_money_page(pipeline)
    token = _items(pipeline, approval_id)["TOKEN"]["token"]["S"]
    answers: dict[str, str] = {}  # by botocore's invocation id: its retries of one call are one

    def count(request: Any) -> None:
        # What moto served: the SendTask* requests that answer this approval's task.
        target = request.headers.get("X-Amz-Target") or b""
        target = target.decode() if isinstance(target, bytes) else str(target)
        body = request.body or b""
        body = body.decode() if isinstance(body, bytes) else str(body)
        if target.startswith("AWSStepFunctions.SendTask") and token in body and "Heartbeat" not in target:
            invocation = request.headers.get("amz-sdk-invocation-id") or b""
            invocation = invocation.decode() if isinstance(invocation, bytes) else str(invocation)
            answers[invocation or f"unnamed {len(answers)}"] = target

    serial.add_listener(count)
    try:
        start = threading.Barrier(20)
        results: list[tuple[int, str]] = []

        def decide(index: int) -> None:
            start.wait()
            answer = browser.post(page, "approve") if index % 2 else browser.post(page, "deny", reason="no")
            results.append((answer.status, answer.h1()))

        threads = [threading.Thread(target=decide, args=(i,)) for i in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        body = pipeline.finish(run_id)
    finally:
        serial.remove_listener(count)

    # One decision: every post of it succeeds (a repeat is a retry), every post of the other is
    # a 409; the task is answered once (moto takes a replay that AWS refuses: our guard counts).
    # Counted by call: botocore may send one call again after an error moto answered under load.
    won = {h1 for status, h1 in results if status == 200}
    assert len(won) == 1 and sorted(s for s, _ in results) == [200] * 10 + [409] * 10
    assert [a.rsplit(".", 1)[1] for a in answers.values()] == [
        "SendTaskSuccess" if won == {"Approved"} else "SendTaskFailure"
    ]
    assert CALLS.counts.get("wire_money", 0) == (1 if won == {"Approved"} else 0)
    assert len([m for m in body["messages"] if m["kind"] == "tool_result"]) == 1


def test_an_expired_link_is_gone_and_decides_nothing() -> None:
    for pipeline in _pipeline({"TOOLPIPE_APPROVAL_TIMEOUT_SECONDS": "2"}):
        pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=1)]), Reply(content="ok"))
        run_id = pipeline.start("pay", agent="gated")
        approval_id = pending(pipeline)["approval_id"]
        browser = Browser(*link_of(approval_id))
        page = browser.open()
        assert page.status == 200
        pipeline.finish(run_id)  # the call waited its 2 s and expired
        gone = exchange("GET", browser.path, browser.query)
        assert (gone.status, gone.h1()) == (410, "Link expired")
        late = browser.post(page, "approve")
        assert late.status == 410
        assert pipeline.runtime.api("GET", f"/approvals/{approval_id}")[1]["status"] == "expired"
        assert CALLS.counts.get("wire_money") is None


def _approval(**changes: Any) -> Approval:
    fields: dict[str, Any] = {
        "approval_id": "a" * 32,
        "run_id": "r1",
        "seq": 3,
        "message_seq": 2,
        "turn": 1,
        "call_id": "c1",
        "tool": "wire_money",
        "arguments_sha256": "1" * 64,
        "arguments_preview": "{}",
        "requester": LOCAL_CALLER,
        "status": ApprovalStatus.PENDING,
        "created_at": "2026-11-22T10:00:00.000+00:00",
        "expires_at": "2026-11-23T10:00:00.000+00:00",
    }
    return Approval(**(fields | changes))


def test_the_signature_binds_the_version_the_id_the_arguments_and_the_expiry() -> None:
    from toolpipe.shared.deferred.links import LinkExpiredError, LinkInvalidError, expiry_seconds

    links = ApprovalLinks(StaticSigningKey(b"k" * 32))
    approval = _approval()
    url = urllib.parse.urlsplit(links.url("https://api.example/v1", approval))
    query = dict(urllib.parse.parse_qsl(url.query))
    assert url.path == f"/v1/approvals/{'a' * 32}/page" and int(query["exp"]) == expiry_seconds(approval)
    now = expiry_seconds(approval) - 60
    links.check(approval, query["exp"], query["sig"], now)
    for other in (
        _approval(approval_id="b" * 32),
        _approval(arguments_sha256="2" * 64),
        _approval(expires_at="2026-11-24T10:00:00.000+00:00"),
    ):
        with pytest.raises(LinkInvalidError):
            links.check(other, str(expiry_seconds(other)), query["sig"], now)
    with pytest.raises(LinkInvalidError):
        ApprovalLinks(StaticSigningKey(b"j" * 32)).check(approval, query["exp"], query["sig"], now)
    with pytest.raises(LinkExpiredError):
        links.check(approval, query["exp"], query["sig"], expiry_seconds(approval))
    # Edited arguments do not break the link: it stays bound to the model's.
    edited = _approval(arguments_sha256="3" * 64, requested_arguments_sha256="1" * 64, arguments="{}")
    links.check(edited, query["exp"], query["sig"], now)
    # The CSRF token is per approval and per cookie.
    cookie = links.new_cookie()
    token = links.csrf_token("a" * 32, cookie)
    assert links.check_csrf("a" * 32, cookie, token)
    assert not links.check_csrf("b" * 32, cookie, token)
    assert not links.check_csrf("a" * 32, links.new_cookie(), token)
    assert not links.check_csrf("a" * 32, cookie, None)


def test_an_edit_that_could_not_be_delivered_is_taken_back_with_its_arguments(pipeline: Pipeline) -> None:
    """The decision is taken back when its task cannot be told; the edited arguments go with it,
    so a plain approval after that runs the model's arguments, not the ones never delivered."""
    from tests.functional.test_approvals import ThrottledOnce, _service

    run_id, [approval] = _waiting(pipeline, call("wire_money", to="ana", amount=250))
    approval_id = approval["approval_id"]
    service = _service(ThrottledOnce())
    with pytest.raises(DeliveryFailedError, match="is not decided"):
        service.decide(approval_id, LOCAL_CALLER, True, arguments='{"to": "eve", "amount": 9000}')
    back = service.get(approval_id, LOCAL_CALLER)
    assert back.status is ApprovalStatus.PENDING and back.arguments is None
    assert back.arguments_sha256 == arguments_hash('{"to": "ana", "amount": 250}')
    assert back.requested_arguments_sha256 is None
    assert service.decide(approval_id, LOCAL_CALLER, True).status is ApprovalStatus.APPROVED
    pipeline.finish(run_id)
    assert tool_messages(pipeline, 1) == ["sent 250.0 to ana"]


@pytest.mark.parametrize("key", ["missing", "short"])
def test_a_signing_key_that_cannot_be_read_leaves_approvals_working_without_links(
    key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The approval is stored and announced without a link (the step never fails for it), the
    JSON API lists it with `callback_url: null`, the page says 503, and the call is decided
    through the API. Each failure is logged in one line, without the key."""
    for pipeline in _pipeline({"TOOLPIPE_LINK_BASE_URL": f"http://{HOST}/v1"}):
        runtime = pipeline.runtime
        if key == "missing":
            runtime.secrets.delete_secret(SecretId=runtime.signing_key_arn, ForceDeleteWithoutRecovery=True)
        else:
            runtime.secrets.put_secret_value(SecretId=runtime.signing_key_arn, SecretString="k" * 31)
        run_id, [approval] = _waiting(pipeline, call("wire_money", to="ana", amount=250))
        approval_id = approval["approval_id"]
        before = _items(pipeline, approval_id)

        for path in ("/approvals", f"/approvals/{approval_id}"):
            event = proxy_event("GET", path, "", [("Host", HOST)], b"", LOCAL_CALLER)
            response = lambdas.call_function(API, event)
            assert response["statusCode"] == 200, response["body"]
            shown = json.loads(response["body"])
            assert [a["callback_url"] for a in shown.get("approvals", [shown])] == [None]
        page = exchange("GET", f"/approvals/{approval_id}/page", f"exp=9999999999&sig={'A' * 43}")
        assert (page.status, page.h1()) == (503, "Not available")
        assert page.header("content-type") == "text/html; charset=utf-8"
        assert _items(pipeline, approval_id) == before

        assert pipeline.runtime.api("POST", f"/approvals/{approval_id}/approve")[0] == 200
        assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
        assert CALLS.counts["wire_money"] == 1
        problem = "cannot be read" if key == "missing" else "is shorter than 32 bytes"
        lines = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert lines and all(problem in line and "\n" not in line for line in lines), lines
        assert not any("k" * 31 in line for line in lines)


def test_other_cookies_on_the_host_do_not_lock_a_person_out(pipeline: Pipeline) -> None:
    run_id, [approval] = _waiting(pipeline, call("wire_money", to="ana", amount=250))
    browser = Browser(*link_of(approval["approval_id"]))
    page = browser.open()
    # Cookies other apps on the host set, that `SimpleCookie` gives up on (and drops ours with).
    browser.cookie = f'theme=dark mode; flag; pref={{"a":1}}; {browser.cookie}; x="open'
    approved = browser.post(page, "approve", headers=[("Origin", f"http://{HOST}")])
    assert (approved.status, approved.h1()) == (200, "Approved")
    pipeline.finish(run_id)
    assert CALLS.counts["wire_money"] == 1


def test_the_csrf_cookie_is_found_among_any_others() -> None:
    from toolpipe.functions.api.page.approval_page import csrf_cookie

    ours = "A" * 43
    for header in (
        f"theme=dark mode; toolpipe_csrf={ours}",
        f"flag; toolpipe_csrf={ours}",
        f'x="open; toolpipe_csrf={ours}; y=[1,2]',
        f"a=b;toolpipe_csrf={ours}; toolpipe_csrf={'B' * 43}",  # the most specific path first
    ):
        assert csrf_cookie(header) == ours, header
    assert csrf_cookie("my_toolpipe_csrf=x; toolpipe_csrfx=y; theme=dark mode") is None


def test_a_multi_line_reason_counts_each_line_break_once_and_typed_text_survives_an_error(
    edits_pipeline: Pipeline,
) -> None:
    pipeline = edits_pipeline
    run_id, approval_id, browser, page = _wire_money_page(pipeline)
    origin = [("Origin", f"http://{HOST}")]

    too_long = "line one\r\n" + "x" * 1_000
    refused = browser.post(page, "deny", origin, reason=too_long)
    assert refused.status == 400
    assert f">{html.escape(too_long.replace(chr(13), ''))}</textarea>" in refused.body  # kept, to shorten
    edit = '{"to": "ana", "amount": "lots"}'
    refused = browser.post(page, "edit", origin, arguments=edit)
    assert refused.status == 400 and html.escape(edit) in refused.body

    # 1,000 characters as the textarea counts them (a line break once), 1,009 as sent (CRLF).
    reason = "\r\n".join(["a" * 99] * 10) + "b"
    denied = browser.post(page, "deny", origin, reason=reason)
    assert (denied.status, denied.h1()) == (200, "Denied")
    pipeline.finish(run_id)
    record = pipeline.runtime.api("GET", f"/approvals/{approval_id}")[1]
    assert record["reason"] == reason.replace("\r\n", "\n") and len(record["reason"]) == 1_000


def test_a_lone_surrogate_in_edited_arguments_is_a_400_not_a_decision(edits_pipeline: Pipeline) -> None:
    pipeline = edits_pipeline
    run_id, approval_id, browser, page = _wire_money_page(pipeline)
    before = _items(pipeline, approval_id)
    origin = [("Origin", f"http://{HOST}")]

    refused = browser.post(page, "edit", origin, arguments='{"to": "\\ud800", "amount": 1}')
    assert refused.status == 400 and "lone surrogate" in refused.h1(), refused.h1()
    status, body = pipeline.runtime.api(
        "POST", f"/approvals/{approval_id}/approve", '{"arguments": {"to": "\\ud800", "amount": 1}}'
    )
    assert status == 400 and "\n" not in body["message"], body
    assert _items(pipeline, approval_id) == before

    approved = browser.post(page, "approve", origin)
    assert (approved.status, approved.h1()) == (200, "Approved")
    pipeline.finish(run_id)
    assert CALLS.counts["wire_money"] == 1


def test_an_uncertain_delivery_from_the_page_offers_the_same_decision_again(
    edits_pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.functional.test_approvals import AnswerLostOnce
    from toolpipe.functions.api import handler

    pipeline = edits_pipeline

    run_id, approval_id, browser, page = _wire_money_page(pipeline)
    origin = [("Origin", f"http://{HOST}")]
    # The API function's own service, its answers to Step Functions timing out once, unheard.
    monkeypatch.setattr(handler.services.approvals, "_tasks", AnswerLostOnce(heard=False))

    edit = '{"amount": 25, "to": "ana"}'
    uncertain = browser.post(page, "edit", origin, arguments=edit)
    assert (uncertain.status, uncertain.h1()) == (503, "Recorded approved; delivery uncertain")
    assert pipeline.runtime.api("GET", f"/approvals/{approval_id}")[1]["status"] == "approved"
    # Its one form sends the same decision (the same arguments) again, and that delivers it.
    again = browser.post(uncertain, uncertain.field("action"), origin, arguments=uncertain.field("arguments"))
    assert (again.status, again.h1()) == (200, "Approved with edited arguments")
    assert browser.post(page, "deny", origin, reason="no").status == 409
    pipeline.finish(run_id)
    assert tool_messages(pipeline, 1)[0].endswith("sent 25.0 to ana")


def test_a_decided_link_opened_after_its_expiry_shows_the_decision() -> None:
    import time

    for pipeline in _pipeline({"TOOLPIPE_APPROVAL_TIMEOUT_SECONDS": "3"}):
        run_id, [approval] = _waiting(pipeline, call("wire_money", to="ana", amount=250))
        browser = Browser(*link_of(approval["approval_id"]))
        page = browser.open()
        origin = [("Origin", f"http://{HOST}")]
        assert browser.post(page, "approve", origin).status == 200
        pipeline.finish(run_id)
        exp = int(urllib.parse.parse_qs(browser.query)["exp"][0])
        time.sleep(max(0.0, exp - time.time() + 0.2))

        shown = exchange("GET", browser.path, browser.query)
        assert (shown.status, shown.h1()) == (200, "Approved: wire_money") and "<form" not in shown.body
        assert browser.post(page, "deny", origin, reason="late").status == 410  # still decides nothing
        forged = exchange("GET", browser.path, browser.query.replace("exp=", "exp=1"))
        assert forged.status == 403


def test_a_cancelled_runs_link_says_so_with_no_forms_and_changes_nothing(pipeline: Pipeline) -> None:
    run_id, [approval] = _waiting(pipeline, call("wire_money", to="ana", amount=250))
    approval_id = approval["approval_id"]
    path, query = link_of(approval_id)
    assert pipeline.runtime.api("POST", f"/runs/{run_id}/cancel")[0] == 200
    before = _items(pipeline, approval_id)

    shown = exchange("GET", path, query)
    assert (shown.status, shown.h1()) == (410, "Run ended (cancelled): nothing to decide")
    assert "<form" not in shown.body
    assert _items(pipeline, approval_id) == before  # a GET: still pending until a decision is tried


def test_arguments_equal_after_the_tools_validation_are_a_plain_approval(pipeline: Pipeline) -> None:
    # Link edits are off here: the model's arguments, however spelled, are no edit, so a link may send them.
    run_id, [approval] = _waiting(pipeline, call("wire_money", to="ana", amount=250))
    browser = Browser(*link_of(approval["approval_id"]))
    page = browser.open()

    approved = browser.post(
        page, "edit", [("Origin", f"http://{HOST}")], arguments='{"amount": 250.0, "to": "ana"}'
    )
    assert (approved.status, approved.h1()) == (200, "Approved")
    pipeline.finish(run_id)
    assert tool_messages(pipeline, 1) == ["sent 250.0 to ana"]  # no note: nothing was changed
    record = pipeline.runtime.api("GET", f"/approvals/{approval['approval_id']}")[1]
    assert record.get("arguments") is None


def test_the_json_api_answers_503_for_an_uncertain_delivery_and_200_for_the_same_decision_again(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.functional.test_approvals import AnswerLostOnce
    from toolpipe.functions.api import handler

    run_id, [approval] = _waiting(pipeline, call("wire_money", to="ana", amount=250))
    path = f"/approvals/{approval['approval_id']}"
    api = pipeline.runtime.api
    monkeypatch.setattr(handler.services.approvals, "_tasks", AnswerLostOnce(heard=True))

    status, body = api("POST", f"{path}/approve")
    assert status == 503 and "recorded approved, but whether its run was told is uncertain" in body["message"]
    assert api("POST", f"{path}/deny", {"reason": "no"})[0] == 409
    status, body = api("POST", f"{path}/approve")
    assert (status, body["status"]) == (200, "approved")
    pipeline.finish(run_id)
    assert CALLS.counts["wire_money"] == 1


def test_a_rotated_key_reaches_the_warm_api_a_new_link_works_at_once_and_the_old_one_still_decides(
    pipeline: Pipeline,
) -> None:
    """`put-secret-value` on the running stack's secret, with the API function warm: a link signed
    with the new key (as a rotated orchestrator signs it) opens at once, and the link sent before
    the rotation still decides, until its expiry."""
    from toolpipe.shared.deferred.links import key_id

    run_id, approval_id, browser, page = _wire_money_page(pipeline)  # warm: the API read the key
    runtime = pipeline.runtime
    old_key = runtime.secrets.get_secret_value(SecretId=runtime.signing_key_arn)["SecretString"].encode()
    new_key = b"n" * 64
    runtime.secrets.put_secret_value(SecretId=runtime.signing_key_arn, SecretString=new_key.decode())

    record = Approval.model_validate(runtime.api("GET", f"/approvals/{approval_id}")[1])
    new_link = urllib.parse.urlsplit(
        ApprovalLinks(StaticSigningKey(new_key)).url(f"http://{HOST}/v1", record)
    )
    assert f"kid={key_id(new_key)}" in new_link.query and f"kid={key_id(old_key)}" in browser.query
    fresh = Browser(new_link.path.removeprefix("/v1"), new_link.query)
    assert (fresh.open().status, exchange("GET", browser.path, browser.query).status) == (200, 200)

    decided = browser.post(page, "approve", [("Origin", f"http://{HOST}")])  # the form from before
    assert (decided.status, decided.h1()) == (200, "Approved")
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    assert CALLS.counts["wire_money"] == 1
