"""The timeline page in a real browser (issue 22, "A timeline page"): headless Chromium opens a
run's page on the local server while the run goes on, sees it end without a reload, and finds
the parallel calls of a turn drawn as bars that overlap in time; a hostile run (arguments of
megabytes, HTML in a tool's output and the model's answer, bidi controls) renders as text,
bounded, and runs no script but the page's own.

The page's contract, as these tests use it: `<main id="timeline">`, a `.status` with the run's
status, one `.bar.call` per tool call with `data-seq` (its slot) and `data-tool`, a `.bar.model`
per turn, `.mark.error` for a failed call, and a link to the runs list (`GET /ui/runs`, a
`<table>` with a link per run).

`TOOLPIPE_UPDATE_SCREENSHOT=1` writes the page as a person sees it to docs/timeline-page.png (the
docs show it); otherwise the screenshot goes to a temporary file, and the committed one must
exist.
"""

import json
import os
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import TEST_AGENT, Pipeline, Reply, _pipeline, call
from tests.e2e.test_approvals import pending
from tests.e2e.test_serve_runs_api import _http
from toolpipe.infra.local.client import CALLER_HEADER
from toolpipe.infra.local.runtime import LOCAL_CALLER
from toolpipe.infra.local.server import LocalServer
from toolpipe.shared.agents import AGENTS, Agent, ModelPrice
from toolpipe.shared.tools import tool

if TYPE_CHECKING:
    from playwright.sync_api import Page, Route

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "timeline-page.png"
# Long enough that two calls started together overlap whatever the workers' scheduling.
CALL_SECONDS = 1.0
RUN_TIMEOUT_MS = 30_000
HOSTILE_HTML = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
# Right-to-left override and isolates: "txt.exe" shown reversed as "exe.txt" if left in.
EMAIL = call("send_email", to="ana@example.com", subject="Report", body="The report is ready.")
BIDI = "invoice\u202etxt.exe \u2066hidden\u2069"


@tool
def echo(text: str) -> str:
    """Answer with the text, as given.

    Args:
        text: Any text.
    """
    return text


@tool
def look_up_the_forecast(city: str) -> str:
    """Today's forecast for a city (a quick call with a long name).

    Args:
        city: The city.
    """
    return f"{city}: sunny"


ECHO_AGENT = Agent(name="echoer", instructions="You echo.", tools=[echo], max_iterations=3)
# A quick call beside a long one: its bar is a sliver of the axis, its name longer than the bar.
FORECASTER = Agent(
    name="forecaster",
    instructions="You forecast.",
    tools=[look_up_the_forecast, *(t for t in TEST_AGENT.tools if t.name == "slow")],
    max_iterations=3,
)
# The tester's tools, priced: each turn shows what its model call cost.
NAPPER = Agent(
    name="napper",
    instructions="You take naps.",
    tools=[t for t in TEST_AGENT.tools if t.name in ("slow", "explode")],
    max_iterations=3,
    price=ModelPrice(input_per_million=2.5, output_per_million=10.0),
)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Pipeline, LocalServer]]:
    """The local runtime with its HTTP server in front, as `toolpipe serve` runs them."""
    for agent in (ECHO_AGENT, NAPPER, FORECASTER):
        monkeypatch.setitem(AGENTS, agent.name, agent)
    for pipeline in _pipeline():
        pipeline.runtime.drain_seconds = 1.0
        with LocalServer(pipeline.runtime) as server:
            yield pipeline, server


def page_url(server: LocalServer, run_id: str) -> str:
    return f"{server.api_url}/ui/runs/{run_id}"


def edges(page: "Page", *selectors: str) -> list[list[tuple[float, float]]]:
    """The left and right edges of each selector's matches, read in one script.

    One read, not one locator per element: the page redraws itself whole (each second while a
    run goes on, and once more when the run's cost arrives), and an element one call finds may
    be gone, replaced by its twin, when the next asks where it is."""
    found: list[list[list[float]]] = page.evaluate(
        """(selectors) => selectors.map((s) => [...document.querySelectorAll(s)].map((e) => {
          const r = e.getBoundingClientRect();
          return [r.left, r.right];
        }))""",
        list(selectors),
    )
    return [[(left, right) for left, right in matches] for matches in found]


def test_a_three_turn_run_is_drawn_live_and_its_parallel_calls_overlap(
    page: "Page", served: tuple[Pipeline, LocalServer], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    pipeline, server = served
    pipeline.script(
        # Arguments differ: the same call three times in a run is a runaway model (a limit).
        Reply(tool_calls=[call("slow", seconds=CALL_SECONDS), call("slow", seconds=CALL_SECONDS + 0.01)]),
        Reply(
            tool_calls=[
                call("slow", seconds=CALL_SECONDS + 0.02),
                call("slow", seconds=CALL_SECONDS / 2),
                call("explode", reason="disk full"),
            ]
        ),
        Reply(content="Both naps done; one call failed."),
    )
    run_id = pipeline.start("Take two naps at once, twice", agent=NAPPER.name)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

    response = page.goto(page_url(server, run_id))
    assert response is not None and response.status == 200
    assert "script-src 'sha256-" in response.headers["content-security-policy"]
    # Opened while it runs; it ends on the page without a reload (the local server's events).
    expect(page.locator(".status").first).to_have_text("running")
    expect(page.locator(".status").first).to_have_text("succeeded", timeout=RUN_TIMEOUT_MS)
    expect(page.locator(".bar.model")).to_have_count(3)
    expect(page.locator(".bar.call")).to_have_count(5)

    # Turn 1 (reply in slot 2): calls in slots 3 and 4; turn 2 (slot 5): slots 6, 7 and 8.
    slots = (3, 4, 6, 7, 8)
    *bars, models = edges(page, *(f'.bar.call[data-seq="{seq}"]' for seq in slots), ".bar.model")
    assert [len(bar) for bar in bars] == [1] * len(slots), f"call bars by slot {slots}: {bars}"
    calls = {seq: bar[0] for seq, bar in zip(slots, bars, strict=True)}
    for first, second in ((3, 4), (6, 7)):
        (a0, a1), (b0, b1) = calls[first], calls[second]
        assert a0 < b1 and b0 < a1, f"calls {first} and {second} ran at once, drawn apart: {a0, a1} {b0, b1}"
    # A turn's calls start after its model call and the next turn's model call after them.
    assert models[1][0] >= max(calls[3][1], calls[4][1]) - 1
    expect(page.locator('.bar.call[data-seq="8"]')).to_have_class("bar call error")
    expect(page.locator(".mark.error")).to_contain_text("explode")
    expect(page.locator("#turn-9")).to_contain_text("Both naps done; one call failed.")
    # What the run cost: the model's, and the infrastructure's GET /runs/{id} reports.
    expect(page.locator(".cost-infra")).to_contain_text("infrastructure $")
    expect(page.locator(".cost-total")).to_contain_text("total $")
    assert errors == []

    update = os.environ.get("TOOLPIPE_UPDATE_SCREENSHOT") == "1"
    page.screenshot(path=SCREENSHOT if update else tmp_path / "timeline-page.png", full_page=True)
    assert SCREENSHOT.is_file(), f"{SCREENSHOT} is missing: run this test with TOOLPIPE_UPDATE_SCREENSHOT=1"

    # The runs list links to it, with its status and a duration.
    page.get_by_role("link", name="all runs").click()
    row = page.locator("tr", has_text=run_id)
    expect(row).to_contain_text("succeeded")
    expect(row).to_contain_text(" s")
    # Its model cost and its AWS cost, as the run's page shows them.
    cells = row.locator("td.num")
    expect(cells.nth(1)).to_have_text(re.compile(r"^\$0\.\d{6}$"))
    expect(cells.nth(2)).to_have_text(re.compile(r"^\$0\.\d{6}$"))
    assert cells.nth(2).inner_text() != "$0.000000"
    row.get_by_role("link", name=run_id).click()
    expect(page.locator(".bar.call")).to_have_count(5)


def test_every_bar_stays_on_the_axis_and_every_tool_name_is_shown_whole(
    page: "Page", served: tuple[Pipeline, LocalServer]
) -> None:
    """Issue 33, item 12: the last bars ran past the axis's end, and a short call's label was cut
    to its first letter (`s` for square_root)."""
    from playwright.sync_api import expect

    pipeline, server = served
    pipeline.script(
        Reply(tool_calls=[call("look_up_the_forecast", city="Lima"), call("slow", seconds=4)]),
        Reply(content="Sunny in Lima."),
    )
    run_id = pipeline.start("Forecast for Lima", agent=FORECASTER.name)
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    page.set_viewport_size({"width": 700, "height": 800})
    page.goto(page_url(server, run_id))
    expect(page.locator(".bar.call")).to_have_count(2)
    expect(page.locator(".label")).to_have_count(2)
    drawn = page.evaluate(
        """() => {
          const axis = document.querySelector('.ticks').getBoundingClientRect();
          const out = [...document.querySelectorAll('.lane > *')].filter((e) => {
            const r = e.getBoundingClientRect();
            return r.left < axis.left - 0.5 || r.right > axis.right + 0.5;
          }).map((e) => e.className + ' ' + e.textContent);
          const labels = [...document.querySelectorAll('.label')].map((l) => {
            const bar = l.parentNode.querySelector('.bar');
            const [r, b] = [l.getBoundingClientRect(), bar.getBoundingClientRect()];
            return {
              text: l.textContent,
              tool: bar.getAttribute('data-tool'),
              cut: l.scrollWidth > l.clientWidth,
              edges: [r.left, r.right],
              bar: [b.left, b.right],
            };
          });
          return { out, labels };
        }"""
    )
    assert drawn["out"] == [], f"drawn past the axis: {drawn['out']}"
    assert sorted(label["text"] for label in drawn["labels"]) == ["look_up_the_forecast", "slow"]
    assert all(label["text"] == label["tool"] and not label["cut"] for label in drawn["labels"]), drawn
    # The quick call's bar is narrower than its name: the name is beside it, whole.
    # Read in the same script as the rest (the page redraws itself whole: see `edges`).
    [((name0, name1), (bar0, bar1))] = [
        (label["edges"], label["bar"]) for label in drawn["labels"] if label["text"] == "look_up_the_forecast"
    ]
    assert bar1 - bar0 < name1 - name0
    assert name0 >= bar1 or name1 <= bar0


def test_a_hostile_run_renders_as_text_bounded_and_runs_no_script(
    page: "Page", served: tuple[Pipeline, LocalServer]
) -> None:
    from playwright.sync_api import expect

    pipeline, server = served
    huge = json.dumps({"text": "A" * 3_000_000 + HOSTILE_HTML})
    pipeline.script(
        Reply(
            tool_calls=[("echo", {"text": HOSTILE_HTML + BIDI}), ("echo", {"text": "placeholder"})],
            raw_arguments={1: huge},
        ),
        Reply(content=f"{HOSTILE_HTML} {BIDI} </script><script>window.__pwned = 3</script>"),
    )
    run_id = pipeline.start(f"Echo this: {HOSTILE_HTML}", agent=ECHO_AGENT.name)
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

    response = page.goto(page_url(server, run_id))
    assert response is not None and response.status == 200
    html = response.body()
    assert len(html) < 200_000, f"the page is {len(html):,} bytes for a run of a few MB"
    expect(page.locator(".bar.call")).to_have_count(2)

    # Every hostile text is there, as text: no element, no handler, no script ran.
    main = page.locator("main")
    expect(main).to_contain_text("<script>window.__pwned = 1</script>")
    expect(main).to_contain_text("</script><script>window.__pwned = 3</script>")
    assert page.evaluate("window.__pwned") is None and dialogs == []
    assert page.locator("main img, main script, main iframe").count() == 0
    assert page.locator("script").count() == 2  # the page's data and its own script
    # Bidi controls are shown by their code point, never applied; texts sit in <bdi dir=auto>.
    text = main.inner_text()
    assert "\u202e" not in text and "\u2066" not in text
    expect(main).to_contain_text("invoice<U+202E>txt.exe <U+2066>hidden<U+2069>")
    assert page.locator("main bdi[dir=auto]").count() > 3
    # The multi-megabyte argument is a preview, on the bar's tooltip as in the data.
    title = page.locator('.bar.call[data-seq="4"]').get_attribute("title") or ""
    assert title.startswith('echo({"text": "AAAA') and len(title) < 1_000

    # The JSON the page draws holds previews only, with where the whole items are.
    status, timeline, _ = _http(f"{server.api_url}/runs/{run_id}/timeline", "GET")
    assert status == 200
    [turn, _final] = timeline["turns"]
    big = turn["calls"][1]
    assert big["arguments_chars"] == len(huge) and len(big["arguments"]) <= 201
    assert big["message"] == f"/runs/{run_id}/messages/4"


def test_a_wait_for_a_person_is_shaded_and_the_page_polls_where_events_are_refused(
    page: "Page", served: tuple[Pipeline, LocalServer]
) -> None:
    """As deployed: API Gateway has no events route (a 403), so the page polls its timeline."""
    from playwright.sync_api import expect

    pipeline, server = served
    pipeline.script(Reply(tool_calls=[EMAIL]), Reply(content="Sent."))
    run_id = pipeline.start("Email Ana that the report is ready", agent="assistant")
    approval = pending(pipeline)
    refused: list[str] = []

    def refuse(route: "Route") -> None:
        refused.append(route.request.url)
        route.fulfill(
            status=403,
            content_type="application/json",
            body='{"statusCode": 403, "message": "Missing Authentication Token"}',
        )

    page.route("**/events*", refuse)
    response = page.goto(page_url(server, run_id))
    assert response is not None and response.status == 200
    wait = page.locator(f'.wait[data-seq="{approval["seq"]}"]')
    expect(wait).to_contain_text("waited for approval · pending")

    status, body = pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    assert status == 200, body
    expect(page.locator(".status").first).to_have_text("succeeded", timeout=RUN_TIMEOUT_MS)
    expect(wait).to_contain_text(f"approved by {LOCAL_CALLER}")
    expect(page.locator(f'.bar.call[data-seq="{approval["seq"]}"]')).to_have_class("bar call ok")
    assert refused, "the page never asked for the event stream"
    # The shaded wait ends before the call's bar begins: the call ran once a person approved it.
    [[(_, shade_end)], [(bar_start, _)]] = edges(
        page, f'.wait[data-seq="{approval["seq"]}"]', f'.bar.call[data-seq="{approval["seq"]}"]'
    )
    assert shade_end <= bar_start + 1


def test_a_run_that_is_not_the_callers_is_not_found(served: tuple[Pipeline, LocalServer]) -> None:
    pipeline, server = served
    pipeline.script(Reply(content="Hello."))
    run_id = pipeline.start("Say hello")
    pipeline.finish(run_id)
    other = {CALLER_HEADER: "arn:aws:iam::000000000000:user/mallory"}
    for path in (f"/runs/{run_id}/timeline", f"/ui/runs/{run_id}"):
        status, body, _ = _http(f"{server.api_url}{path}", "GET", **other)
        assert status == 404, (path, body)
    # The other caller's list does not show it; the owner's does.
    request = urllib.request.Request(f"{server.api_url}/ui/runs", headers=other)
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert run_id not in answer.read().decode()
    with urllib.request.urlopen(f"{server.api_url}/ui/runs", timeout=30) as answer:
        assert run_id in answer.read().decode()
