"""The approval page in a real browser (issue 9: "a browser test"): headless Chromium opens the
callback URL the local server hands out, a person reads the tool and its arguments, decides
with the page's buttons, and the run goes on from that decision.

The page's contract, as these tests use it: an `<h1>` with the tool's name, the arguments in a
`<pre>`, a button named `Approve`, a `<textarea>` labelled `Reason` with a button `Deny` (and,
only where the stack turned link edits on, a `<textarea>` labelled `Arguments (JSON)` with a
button `Approve with these arguments`); after the POST, an answer page whose `<h1>` says
`Approved` or `Denied`. A human-input call's question page:
an `<h1>` that says `Question from the agent`, the question in a `<pre>`, a `<textarea>` labelled
`Answer` and a button `Send answer`; after the POST, an `<h1>` that says `Answer sent`.

`TOOLPIPE_UPDATE_SCREENSHOT=1` writes the pages as a person first sees them to
docs/approval-page.png and docs/question-page.png (the docs show them); otherwise the screenshot goes to a temporary
file, and the committed one must exist.
"""

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import Pipeline, Reply, _pipeline, call
from tests.e2e.conftest import BrowserUnavailableError, launch
from tests.e2e.test_approvals import _sent_emails, pending, tool_messages
from tests.e2e.test_run_events import of, subscribe
from tests.e2e.test_serve_runs_api import _http
from toolpipe.infra.cli.output import approval_line
from toolpipe.infra.local.server import LocalServer

if TYPE_CHECKING:
    from playwright.sync_api import Page, Playwright

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "approval-page.png"
QUESTION_SCREENSHOT = ROOT / "docs" / "question-page.png"
EMAIL = call("send_email", to="ana@example.com", subject="Report", body="The report is ready.")


@pytest.fixture
def served() -> Iterator[tuple[Pipeline, LocalServer]]:
    """The local runtime with its HTTP server in front, as `toolpipe serve` runs them, in this
    process: the test reads moto's SES and the scripted model's requests directly."""
    for pipeline in _pipeline():
        # A failed test leaves its run waiting: shut down without the 30 s wait for it to end.
        pipeline.runtime.drain_seconds = 1.0
        with LocalServer(pipeline.runtime) as server:
            yield pipeline, server


def callback_url(server: LocalServer, approval: dict[str, Any]) -> str:
    """The approval's link as an API client (or the email) gets it."""
    status, shown, _ = _http(f"{server.api_url}/approvals/{approval['approval_id']}", "GET")
    assert status == 200, shown
    url = shown.get("callback_url")
    assert url, (
        f"GET /approvals/{{id}} has no callback_url (fields: {sorted(shown)}): the approval page "
        "(issue 9, item 4) is not served yet"
    )
    return str(url)


def token_of(pipeline: Pipeline, approval_id: str) -> str:
    item = pipeline.runtime.dynamodb.get_item(
        TableName="toolpipe-local",
        Key={"pk": {"S": f"APPROVAL#{approval_id}"}, "sk": {"S": "TOKEN"}},
    )["Item"]
    return str(item["token"]["S"])


def status_of(server: LocalServer, approval_id: str) -> str:
    return str(_http(f"{server.api_url}/approvals/{approval_id}", "GET")[1]["status"])


def open_page(page: "Page", pipeline: Pipeline, server: LocalServer) -> tuple[dict[str, Any], str]:
    """Start a run whose model asks to email Ana, and open its approval page: the waiting
    approval and the page's URL."""
    from playwright.sync_api import expect

    pipeline.script(Reply(tool_calls=[EMAIL]), Reply(content="Done."))
    pipeline.start("Email Ana that the report is ready", agent="assistant")
    approval = pending(pipeline)
    url = callback_url(server, approval)
    assert token_of(pipeline, approval["approval_id"]) not in url  # a bearer credential: never in a URL

    response = page.goto(url)
    assert response is not None and response.status == 200, response and response.status
    expect(page.locator("h1")).to_contain_text("send_email")
    expect(page.locator("pre").filter(has_text="ana@example.com")).to_have_count(1)
    # Opening the link decided nothing (mail scanners open links too).
    assert status_of(server, approval["approval_id"]) == "pending" and _sent_emails() == []
    return approval, url


def test_a_person_approves_an_email_in_the_browser_and_it_is_sent_once(
    page: "Page", served: tuple[Pipeline, LocalServer], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    pipeline, server = served
    approval, _ = open_page(page, pipeline, server)
    update = os.environ.get("TOOLPIPE_UPDATE_SCREENSHOT") == "1"
    page.screenshot(path=SCREENSHOT if update else tmp_path / "approval-page.png", full_page=True)
    assert SCREENSHOT.is_file(), f"{SCREENSHOT} is missing: run this test with TOOLPIPE_UPDATE_SCREENSHOT=1"

    # No editor on a link by default: Approve and Deny only.
    expect(page.get_by_role("button", name="Approve with these arguments")).to_have_count(0)
    page.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("h1")).to_contain_text("Approved")
    # The decision names the tool once, in the call's facts.
    expect(page.get_by_text("send_email", exact=True)).to_have_count(1)

    body = pipeline.finish(approval["run_id"])
    assert body["run"]["status"] == "succeeded"
    assert _sent_emails() == [(["ana@example.com"], "Report")]
    assert tool_messages(pipeline, 1)[0].startswith("Email sent to ana@example.com (message id ")
    assert status_of(server, approval["approval_id"]) == "approved"


def test_a_person_denies_an_email_in_the_browser_and_the_model_reads_why(
    page: "Page", served: tuple[Pipeline, LocalServer]
) -> None:
    from playwright.sync_api import expect

    pipeline, server = served
    approval, _ = open_page(page, pipeline, server)

    page.get_by_label("Reason").fill("Ana already has the report.")
    page.get_by_role("button", name="Deny", exact=True).click()
    expect(page.locator("h1")).to_contain_text("Denied")

    body = pipeline.finish(approval["run_id"])
    assert body["run"]["status"] == "succeeded"
    assert _sent_emails() == []
    assert tool_messages(pipeline, 1) == [
        "Error: A person denied the call to 'send_email'; it was not run. "
        "Their reason: Ana already has the report."
    ]
    assert status_of(server, approval["approval_id"]) == "denied"


def test_a_multi_line_reason_at_its_limit_denies_with_other_cookies_on_the_host(
    page: "Page", served: tuple[Pipeline, LocalServer]
) -> None:
    """What a real browser sends: other apps' cookies on the same host (one with a space, which
    `SimpleCookie` gives up on) beside ours, and a textarea's line breaks as CRLF, though its
    `maxlength` counts each once."""
    from urllib.parse import urlsplit

    from playwright.sync_api import expect

    pipeline, server = served
    host = urlsplit(server.api_url).hostname
    page.context.add_cookies([{"name": "theme", "value": "dark mode", "domain": host, "path": "/"}])
    approval, _ = open_page(page, pipeline, server)

    reason = page.get_by_label("Reason")
    reason.click()
    for _ in range(9):
        page.keyboard.insert_text("a" * 99)
        page.keyboard.press("Enter")
    page.keyboard.insert_text("b" * 109)  # 1,000 characters as the textarea counts them
    assert len(reason.input_value()) == 1_000
    page.get_by_role("button", name="Deny", exact=True).click()
    expect(page.locator("h1")).to_contain_text("Denied")

    pipeline.finish(approval["run_id"])
    assert _sent_emails() == []
    shown = _http(f"{server.api_url}/approvals/{approval['approval_id']}", "GET")[1]
    assert shown["status"] == "denied" and shown["reason"].count("\n") == 9 and len(shown["reason"]) == 1_000


def test_a_person_answers_the_agents_question_in_the_browser_and_the_model_reads_it(
    page: "Page", served: tuple[Pipeline, LocalServer], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    pipeline, server = served
    question = "Which city should I book?\nLyon or Turin"
    read = subscribe(pipeline.runtime)
    pipeline.script(Reply(tool_calls=[call("ask_user", question=question)]), Reply(content="Booked Lyon."))
    run_id = pipeline.start("Book me a trip", agent="assistant")
    asked = pending(pipeline)
    assert asked["kind"] == "human"
    url = callback_url(server, asked)
    assert token_of(pipeline, asked["approval_id"]) not in url
    # ApprovalRequested carries the same link (what the email sends), never the token.
    [event] = of(read(lambda events: bool(of(events, "ApprovalRequested"))), "ApprovalRequested")
    assert (event["kind"], event["callback_url"]) == ("human", url)
    # What `toolpipe run` prints while it waits: the link, on a line that says "answer".
    [link_line] = [line for line in approval_line(dict(asked, callback_url=url)).splitlines() if url in line]
    assert "answer" in link_line

    response = page.goto(url)
    assert response is not None and response.status == 200
    expect(page.locator("h1")).to_contain_text("Question from the agent")
    expect(page.locator("pre").first).to_have_text(question)
    assert status_of(server, asked["approval_id"]) == "pending"  # opening it answered nothing
    update = os.environ.get("TOOLPIPE_UPDATE_SCREENSHOT") == "1"
    page.screenshot(path=QUESTION_SCREENSHOT if update else tmp_path / "question-page.png", full_page=True)
    assert QUESTION_SCREENSHOT.is_file(), (
        f"{QUESTION_SCREENSHOT} is missing: run with TOOLPIPE_UPDATE_SCREENSHOT=1"
    )

    page.get_by_label("Answer", exact=True).fill("Lyon, in May")
    page.get_by_role("button", name="Send answer").click()
    expect(page.locator("h1")).to_contain_text("Answer sent")

    body = pipeline.finish(run_id)
    assert body["run"]["status"] == "succeeded"
    assert tool_messages(pipeline, 1) == ["Lyon, in May"]
    assert status_of(server, asked["approval_id"]) == "answered"


def test_the_browser_reads_a_page_the_local_server_serves(
    page: "Page", served: tuple[Pipeline, LocalServer]
) -> None:
    """The browser machinery on its own (Chromium starts, offline, and reaches the local
    server): when the page tests fail, this tells a missing page from a missing browser."""
    from playwright.sync_api import expect

    _, server = served
    response = page.goto(f"{server.api_url}/openapi.json")
    assert response is not None and response.status == 200
    expect(page.locator("body")).to_contain_text('"/approvals/{approval_id}/approve"')


@pytest.mark.parametrize(
    ("executable", "reason"),
    [
        ("/nonexistent/chromium", "no browser at /nonexistent/chromium: run `make install`"),
        ("/bin/false", "/bin/false did not start: "),
    ],
)
def test_a_browser_that_cannot_start_is_one_line_naming_the_fix(
    playwright: "Playwright", executable: str, reason: str
) -> None:
    with pytest.raises(BrowserUnavailableError) as raised:
        launch(playwright, executable)
    assert str(raised.value).startswith(reason) and "\n" not in str(raised.value)
