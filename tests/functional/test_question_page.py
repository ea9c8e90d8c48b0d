"""A human-input call's question page, through the real API handler on moto (issue 9, item 7a):
the same signed link, CSRF pair and headers as the approval page; the model's question; an
answer box or a form from the tool's result schema; the answer, turned into the schema's types
and checked server-side, is the call's result, once."""

import html
import json
import re
import urllib.parse
from typing import Any

import pytest

from tests.conftest import Pipeline, call
from tests.e2e.test_deferred import DEFERRING, tool_messages, waiting
from tests.functional.test_approval_page import (
    HOST,
    Browser,
    Page,
    _all_pending,
    by_link,
    exchange,
    link_of,
)
from tests.functional.test_approvals import _items
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, Agent
from toolpipe.shared.tools import tool

# A flat object schema: each property one input, in this order.
BOOKING = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "title": "City", "description": "Where to, as on the ticket"},
        "nights": {"type": "integer", "minimum": 1, "title": "Nights"},
        "budget": {"type": "number", "description": "In euros"},
        "window": {"type": "boolean", "title": "Window seat"},
        "fare": {"enum": ["saver", "flex", 3], "title": "Fare"},
    },
    "required": ["city", "nights", "fare"],
}
# Nested: no field-by-field form; one JSON box.
ROUTE = {
    "type": "object",
    "properties": {"stops": {"type": "array", "items": {"type": "string"}}},
    "required": ["stops"],
}


@tool(deferred="human", result_schema=BOOKING)
def book_trip(question: str) -> str:
    """Ask the user for the trip's details.

    Args:
        question: What to ask.
    """
    raise AssertionError("a deferred tool is never run")


@tool(deferred="human", result_schema=ROUTE)
def plan_route(question: str) -> str:
    """Ask the user for the route's stops.

    Args:
        question: What to ask.
    """
    raise AssertionError("a deferred tool is never run")


ASKING = Agent(
    name="asking",
    instructions="You ask.",
    tools=[*DEFERRING.tools, book_trip, plan_route],
    max_iterations=4,
)


@pytest.fixture(autouse=True)
def asking_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(AGENTS, ASKING.name, ASKING)


def _asked(pipeline: Pipeline, tool_call: Any) -> tuple[str, str, Browser, Page]:
    """A run whose model makes `tool_call`, and its question page opened: the run, the call's
    id, the browser (with its CSRF cookie) and the page."""
    # A test that leaves its call waiting: shut down without the 30 s wait for its run to end.
    pipeline.runtime.drain_seconds = 1.0
    pipeline.script(Reply(tool_calls=[tool_call]), Reply(content="Booked."))
    run_id = pipeline.start("Book me a <b>trip</b>", agent="asking")
    approval_id = waiting(pipeline)["approval_id"]
    browser = Browser(*link_of(approval_id))
    page = browser.open()
    assert page.status == 200, page.body
    return run_id, approval_id, browser, page


def _pre(page: Page) -> str:
    match = re.search(r"<pre>(.*?)</pre>", page.body, re.S)
    assert match, page.body
    return html.unescape(match.group(1))


def _record(pipeline: Pipeline, approval_id: str) -> dict[str, Any]:
    return dict(pipeline.runtime.api("GET", f"/approvals/{approval_id}")[1])


def test_the_question_page_shows_the_question_and_a_free_text_answer_is_the_result_once(
    pipeline: Pipeline,
) -> None:
    question = "Which city?\n  - Lyon\n  - <script>alert(1)</script>"
    run_id, approval_id, browser, page = _asked(pipeline, call("ask_user", question=question))
    path, query = browser.path, browser.query
    assert path == f"/approvals/{approval_id}/page"
    assert re.fullmatch(r"exp=\d+&kid=[A-Za-z0-9_-]{8}&sig=[A-Za-z0-9_-]{43}", query)
    record = _record(pipeline, approval_id)

    assert page.h1() == "Question from the agent"
    assert _pre(page) == question  # whole, its whitespace kept, escaped
    assert "<script>" not in page.body and "&lt;script&gt;" in page.body
    for fact in ("ask_user", run_id, "Book me a &lt;b&gt;trip&lt;/b&gt;", record["expires_at"]):
        assert fact in page.body, fact
    assert '<label for="answer">Answer</label><textarea id="answer" name="answer"' in page.body
    assert '<button type="submit">Send answer</button>' in page.body
    for button in ("Approve", "Deny"):  # a question is answered, not approved
        assert f">{button}</button>" not in page.body
    # The approval page's headers and cookie, unchanged.
    assert page.header("cache-control") == "no-store" and page.header("referrer-policy") == "same-origin"
    assert "default-src 'none'" in page.header("content-security-policy")
    assert "SameSite=Strict" in page.headers["set-cookie"][0]

    # A mail scanner or a link preview: GET and HEAD answer nothing.
    before = _items(pipeline, approval_id)
    for _ in range(10):
        assert exchange("GET", path, query).status == 200
        assert exchange("HEAD", path, query).status == 200
    assert _items(pipeline, approval_id) == before

    sent = browser.post(page, "answer", [("Origin", f"http://{HOST}")], answer="Lyon,\n  in May")
    assert (sent.status, sent.h1()) == (200, "Answer sent")
    assert "<form" not in sent.body and "Lyon,\n  in May" in sent.body
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    assert tool_messages(pipeline, 1) == ["Lyon,\n  in May"]
    record = _record(pipeline, approval_id)
    assert (record["status"], record["decided_by"]) == ("answered", by_link())
    assert record["decided_by_authenticated"] is False

    # Single use: the page shows the answer and no form; another answer is a 409 and changes nothing.
    after = exchange("GET", path, query)
    assert after.status == 200 and "<form" not in after.body and "Lyon," in after.body
    again = browser.post(page, "answer", answer="Paris")
    assert again.status == 409 and again.h1().startswith("Already answered")
    assert _record(pipeline, approval_id)["answer_preview"] == "Lyon,\n  in May"
    assert len(pipeline.model.requests) == 2


def test_a_flat_result_schema_is_a_form_whose_strings_become_the_schemas_types(pipeline: Pipeline) -> None:
    run_id, _, browser, page = _asked(pipeline, call("book_trip", question="Where and how long?"))
    body = page.body
    # One input per property, in the schema's order, labelled by title (else name), required marked.
    labels = [html.unescape(x) for x in re.findall(r'<label for="field-\d">(.*?)</label>', body)]
    assert labels == ["City (required)", "Nights (required)", "budget", "Window seat", "Fare (required)"]
    assert re.search(r'<input type="text" id="field-0" name="field.city" value="" required', body)
    assert re.search(
        r'<input type="number" step="1" id="field-1" name="field.nights" value="" required', body
    )
    assert re.search(r'<input type="number" step="any" id="field-2" name="field.budget" value=""[ >]', body)
    assert re.search(r'<input type="checkbox" id="field-3" name="field.window" value="true"[ >]', body)
    assert re.search(r'<select id="field-4" name="field.fare" required', body)
    options = re.findall(r'<option value="(\d*)"[^>]*>(.*?)</option>', body)
    assert options == [("", "(choose)"), ("0", "saver"), ("1", "flex"), ("2", "3")]
    assert "Where to, as on the ticket" in body and "In euros" in body  # descriptions as hints
    assert 'name="answer"' not in body

    fields = {"field.city": " Lyon ", "field.nights": "3", "field.budget": "120.5", "field.window": "true"}
    sent = browser.post(page, "answer", **fields, **{"field.fare": "2"})
    assert (sent.status, sent.h1()) == (200, "Answer sent"), sent.body
    pipeline.finish(run_id)
    [result] = tool_messages(pipeline, 1)
    assert json.loads(result) == {"city": " Lyon ", "nights": 3, "budget": 120.5, "window": True, "fare": 3}


def test_a_schema_the_form_cannot_ask_field_by_field_is_one_json_box(pipeline: Pipeline) -> None:
    run_id, approval_id, browser, page = _asked(pipeline, call("plan_route", question="Which stops?"))
    assert '<label for="answer">Answer (JSON)</label><textarea id="answer" name="answer"' in page.body
    assert "field." not in page.body
    before = _items(pipeline, approval_id)
    for typed, error in [
        ('{"stops": ["Lyon"', "Not sent: invalid answer: not JSON"),
        ('{"stops": "Lyon"}', "Not sent: invalid answer: answer.stops: 'Lyon' is not of type 'array'"),
    ]:
        again = browser.post(page, "answer", answer=typed)
        assert again.status == 400 and again.h1().startswith(error), again.h1()
        assert html.escape(typed) in again.body  # what was typed, kept
    assert _items(pipeline, approval_id) == before
    sent = browser.post(page, "answer", answer='{"stops": ["Lyon", "Turin"]}')
    assert (sent.status, sent.h1()) == (200, "Answer sent")
    pipeline.finish(run_id)
    assert tool_messages(pipeline, 1) == ['{"stops": ["Lyon", "Turin"]}']


# Each: what the form posts, and the one line that comes back (nothing is answered).
BAD_FORMS: list[tuple[dict[str, str], str]] = [
    ({"field.nights": "three"}, "Not sent: invalid answer: Nights: 'three' is not a whole number"),
    ({"field.nights": "2", "field.budget": "nan"}, "Not sent: invalid answer: budget: 'nan' is not a number"),
    ({"field.nights": "0"}, "Not sent: invalid answer: answer.nights: 0 is less than the minimum of 1"),
    (
        {"field.nights": "2", "field.fare": "7"},
        "Not sent: invalid answer: Fare: choose one of the listed values",
    ),
    (
        {"field.nights": "2", "field.fare": ""},
        "Not sent: invalid answer: answer: 'fare' is a required property",
    ),
    # A superscript is a digit to str.isdigit() and a ValueError to int(): once a 500.
    (
        {"field.nights": "2", "field.fare": "\u00b2"},
        "Not sent: invalid answer: Fare: choose one of the listed values",
    ),
    ({"field.nights": "1_000"}, "Not sent: invalid answer: Nights: '1_000' is not a whole number"),
]


def test_a_form_answer_that_does_not_fit_is_shown_again_as_typed_and_changes_nothing(
    pipeline: Pipeline,
) -> None:
    _, approval_id, browser, page = _asked(pipeline, call("book_trip", question="Where?"))
    before = _items(pipeline, approval_id)
    for fields, error in BAD_FORMS:
        typed = {"field.city": "Ly<on>", "field.window": "true", "field.fare": "1"} | fields
        again = browser.post(page, "answer", **typed)
        assert (again.status, again.h1()) == (400, error)
        assert 'value="Ly&lt;on&gt;"' in again.body and " checked" in again.body  # as typed
        assert '<button type="submit">Send answer</button>' in again.body and again.field("csrf")
    assert _items(pipeline, approval_id) == before
    assert _record(pipeline, approval_id)["status"] == "pending"


def test_a_blank_free_text_answer_is_refused(pipeline: Pipeline) -> None:
    question = "Which city? " + "Say why. " * 400  # past the 2,000 characters the record keeps
    _, approval_id, browser, page = _asked(pipeline, call("ask_user", question=question))
    assert _pre(page) == question  # the page shows it whole, from the run's history
    before = _items(pipeline, approval_id)
    again = browser.post(page, "answer", answer="   ")
    assert (again.status, again.h1()) == (
        400,
        "Not sent: invalid answer: a free-text answer is a non-blank string",
    )
    assert _items(pipeline, approval_id) == before


def test_forged_links_and_posts_without_the_csrf_pair_answer_nothing(pipeline: Pipeline) -> None:
    pipeline.runtime.drain_seconds = 1.0
    pipeline.script(
        Reply(tool_calls=[call("ask_user", question="Which city?"), call("read_clipboard", format="text")]),
        Reply(content="ok"),
    )
    pipeline.start("go", agent="asking")
    approvals = _all_pending(pipeline, 2)
    [client] = [a for a in approvals if a["kind"] == "client"]
    [question] = [a for a in approvals if a["kind"] == "human"]
    # A program answers a client-executed call: it has no link.
    assert _record(pipeline, client["approval_id"])["callback_url"] is None
    approval_id = question["approval_id"]
    path, query = link_of(approval_id)
    browser = Browser(path, query)
    page = browser.open()
    before = _items(pipeline, approval_id)
    form = [("Content-Type", "application/x-www-form-urlencoded")]
    elsewhere = Browser(f"/approvals/{client['approval_id']}/page", query)
    elsewhere.cookie = browser.cookie
    forged = {
        "tampered signature": browser.post(page, "answer", answer="x", sig="A" * 43),
        "a key id no key has": browser.post(page, "answer", answer="x", kid="A" * 8),
        "later exp": browser.post(page, "answer", answer="x", exp=str(int(page.field("exp")) + 3600)),
        "another call's path": elsewhere.post(page, "answer", answer="x"),
    }
    for why, answer in forged.items():
        assert (answer.status, answer.h1()) == (403, "Link not valid"), why
    refused = {
        "no token": exchange(
            "POST", path, query, [*form, ("Cookie", browser.cookie)], b"action=answer&answer=x"
        ),
        "no cookie": exchange(
            "POST",
            path,
            query,
            form,
            urllib.parse.urlencode({"action": "answer", "answer": "x", "csrf": page.field("csrf")}).encode(),
        ),
        "another site": browser.post(page, "answer", [("Origin", "https://evil.example")], answer="x"),
    }
    for why, answer in refused.items():
        assert (answer.status, answer.h1()) == (403, "Refused"), why
    assert _items(pipeline, approval_id) == before


def test_an_answer_whose_delivery_is_uncertain_is_kept_and_its_page_sends_it_again(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.functional.test_approvals import AnswerLostOnce
    from toolpipe.functions.api import handler

    run_id, approval_id, browser, page = _asked(pipeline, call("ask_user", question="Which city?"))
    origin = [("Origin", f"http://{HOST}")]
    monkeypatch.setattr(handler.services.approvals, "_tasks", AnswerLostOnce(heard=False))

    uncertain = browser.post(page, "answer", origin, answer="Lyon")
    assert (uncertain.status, uncertain.h1()) == (503, "Recorded answered; delivery uncertain")
    assert _record(pipeline, approval_id)["status"] == "answered"
    again = browser.post(uncertain, "answer", origin, answer=uncertain.field("answer"))
    assert (again.status, again.h1()) == (200, "Answer sent")
    assert browser.post(page, "answer", origin, answer="Paris").status == 409
    pipeline.finish(run_id)
    assert tool_messages(pipeline, 1) == ["Lyon"]
