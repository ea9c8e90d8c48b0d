"""Handoff through the whole local pipeline (issue 20): the example's `triage` agent hands the
run to `assistant`; the run record, `toolpipe show`, the run events and an approval page name
both agents, in order."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.conftest import Capture, Pipeline, _pipeline, call
from tests.e2e.test_approval_link import _http, _link
from tests.e2e.test_approvals import _sent_emails
from tests.e2e.test_run_events import subscribe
from toolpipe.infra.cli import main
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.infra.local.server import LocalServer
from toolpipe.shared.agents import AGENTS, all_agents

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "events"


@pytest.fixture(autouse=True)
def example_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's two agents, registered whatever an earlier test in this process left. The
    app is loaded first (once a process): undone, the patch leaves its agents as it loaded them,
    for the tests that come after."""
    from assistant.agents import assistant, triage

    all_agents()
    monkeypatch.setitem(AGENTS, "assistant", assistant)
    monkeypatch.setitem(AGENTS, "triage", triage)


def test_toolpipe_show_names_who_answered_each_turn(tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path / "state"))
    out, err = Capture(), Capture()

    # The scripted demo model routes as a front desk would: triage offers only the transfer.
    code = main(["run", "--agent", "triage", "What is the square root of 16?"], out, err)

    assert code == 0, out.text + err.text
    run_id = out.text.split("run ")[1].split()[0]
    shown = Capture()
    assert main(["show", run_id], shown) == 0
    lines = shown.text.splitlines()
    assert lines[0].startswith(f"run {run_id} · agent triage · succeeded")
    assert lines[1] == "handoff after turn 1: triage -> assistant (transfer)"
    assert [line.split("] ", 1)[1] for line in lines if "] model" in line or "] answer" in line] == [
        "model (turn 1): 1 tool call(s)",
        "model [assistant] (turn 2): 1 tool call(s)",
        "answer (assistant): The square root of 16 is 4.0.",
    ]
    as_json = Capture()
    assert main(["show", run_id, "--json"], as_json) == 0
    run = json.loads(as_json.text)["run"]
    assert (run["agent"], run["active_agent"]) == ("triage", "assistant")


def test_the_run_events_name_both_agents(pipeline: Pipeline) -> None:
    read = subscribe(pipeline.runtime)
    pipeline.script(
        Reply(tool_calls=[call("transfer_to_assistant")]),
        Reply(tool_calls=[call("sum", a=2, b=3)]),
        Reply(content="5"),
    )
    run_id = pipeline.start("2 + 3?", agent="triage")
    body = pipeline.finish(run_id)

    events = read(lambda got: any(e["detail-type"] == "RunCompleted" for e in got))
    kinds = [e["detail-type"] for e in events]
    assert kinds.index("RunHandedOff") < kinds.index("RunCompleted")
    [handed] = [e["detail"] for e in events if e["detail-type"] == "RunHandedOff"]
    Draft202012Validator(json.loads((SCHEMAS / "RunHandedOff.json").read_text())).validate(handed)
    assert (handed["from_agent"], handed["to_agent"], handed["kind"], handed["turn"]) == (
        "triage",
        "assistant",
        "transfer",
        1,
    )
    assert handed["agent"] == "triage" and handed["run_id"] == run_id
    assert body["run"]["handoffs"] == [
        {
            "turn": 1,
            "kind": "transfer",
            "from_agent": "triage",
            "to_agent": "assistant",
            "via": "transfer_to_assistant",
            "tools": None,
        }
    ]
    assert [m.get("agent") for m in body["messages"] if m["kind"] == "assistant"] == [
        "triage",
        "assistant",
        "assistant",
    ]


@pytest.fixture
def served() -> Iterator[tuple[Pipeline, LocalServer]]:
    for pipeline in _pipeline():
        with LocalServer(pipeline.runtime) as server:
            yield pipeline, server


def test_a_call_that_waits_after_a_handoff_names_its_agent(served: tuple[Pipeline, LocalServer]) -> None:
    pipeline, server = served
    email = call("send_email", to="ana@example.com", subject="Report", body="Ready.")
    pipeline.script(
        Reply(tool_calls=[call("transfer_to_assistant")]), Reply(tool_calls=[email]), Reply(content="Sent.")
    )
    run_id = pipeline.start("Email Ana", agent="triage")

    approval = _link(server)
    assert approval["agent"] == "assistant" and approval["tool"] == "send_email"
    status, page, _ = _http(approval["callback_url"], "GET")
    assert status == 200 and "<dt>Agent</dt><dd>assistant</dd>" in page
    status, _ = pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    assert status == 200
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    assert _sent_emails() == [(["ana@example.com"], "Report")]


def test_a_fork_after_a_handoff_is_started_by_its_runs_agent_and_goes_on_with_the_handed_one(
    pipeline: Pipeline,
) -> None:
    """The fork's 202 names the agent its record starts with, as GET /runs/{id} does; its
    history hands the next turn to the agent the run was handed to."""
    pipeline.script(
        Reply(tool_calls=[call("transfer_to_assistant")]),
        Reply(tool_calls=[call("sum", a=2, b=3)]),
        Reply(content="5"),
        Reply(content="6, in the fork"),
    )
    run_id = pipeline.start("2 + 3?", agent="triage")
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"

    status, forked = pipeline.runtime.api("POST", f"/runs/{run_id}/fork", {"turn": 2, "input": "and 3 + 3?"})

    assert status == 202 and forked["agent"] == "triage", forked
    fork = pipeline.finish(forked["run_id"])["run"]
    assert (fork["agent"], fork["active_agent"], fork["output"]) == ("triage", "assistant", "6, in the fork")
