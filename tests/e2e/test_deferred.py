"""Deferred tools on the local runtime, end to end (issue 9, item 7): a human-input call waits
for a person's answer, a client-executed call for the caller's program's result; both on the
approvals' task tokens, answered once."""

import dataclasses
import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from tests.conftest import CALLS, TEST_AGENT, Pipeline, _pipeline, call
from tests.e2e.test_approvals import pending as waiting  # a deferred call waits in the same inbox
from tests.e2e.test_approvals import tool_messages
from tests.e2e.test_run_events import of, subscribe, validate
from toolpipe.infra.local.runtime import LOCAL_CALLER
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, AfterTool, Agent, BeforeTool, Hooks, agent_tool
from toolpipe.shared.agents.app import waiting_child
from toolpipe.shared.tools import schema_tool, tool

OTHER = "arn:aws:iam::000000000000:user/someone-else"


@tool(deferred="human")
def ask_user(question: str) -> str:
    """Ask the user a question and get their answer.

    Args:
        question: What to ask.
    """
    raise AssertionError("a deferred tool is never run")


@tool(deferred="human", wait_seconds=2)
def quick_question(question: str) -> str:
    """Ask the user something that only matters for a second.

    Args:
        question: What to ask.
    """
    raise AssertionError("a deferred tool is never run")


class Seats(BaseModel):
    seats: int
    window: bool = False


@tool(deferred="human", result_schema=Seats)
def choose_seats(question: str) -> str:
    """Ask the user how many seats to book.

    Args:
        question: What to ask.
    """
    raise AssertionError("a deferred tool is never run")


# Return of control: the caller's program runs it and posts the result.
read_clipboard = schema_tool(
    {
        "name": "read_clipboard",
        "description": "Read the user's clipboard on their machine.",
        "parameters": {
            "type": "object",
            "properties": {"format": {"type": "string"}},
            "required": ["format"],
        },
    },
    deferred="client",
    result_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)

DEFERRING = Agent(
    name="deferring",
    instructions="You ask before you act.",
    tools=[ask_user, choose_seats, read_clipboard, quick_question, *TEST_AGENT.tools],
    max_iterations=4,
)


@pytest.fixture(autouse=True)
def deferring_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(AGENTS, DEFERRING.name, DEFERRING)


@pytest.fixture
def short_waits() -> Iterator[Pipeline]:
    # The deferred tools here wait the settings' time (no wait_seconds of their own): long
    # enough that the request is stored before the wait ends even on a loaded machine (with 1 s,
    # a parallel run once timed the task out before the orchestrator had written the call's gate).
    yield from _pipeline({"TOOLPIPE_APPROVAL_TIMEOUT_SECONDS": "3"})


def history(pipeline: Pipeline, run_id: str) -> list[dict[str, Any]]:
    return list(pipeline.runtime.api("GET", f"/runs/{run_id}/messages")[1]["messages"])


def test_a_persons_answer_reaches_the_model_once(pipeline: Pipeline) -> None:
    pipeline.script(
        Reply(tool_calls=[call("ask_user", question="Which city?")]), Reply(content="Booked for Lyon.")
    )
    run_id = pipeline.start("book a trip", agent="deferring")
    asked = waiting(pipeline)
    assert (asked["kind"], asked["question"], asked["tool"], asked["result_schema"]) == (
        "human",
        "Which city?",
        "ask_user",
        None,
    )
    assert "token" not in str(asked).lower()
    path = f"/approvals/{asked['approval_id']}"
    # Not a decision: approve and deny refuse it, and change nothing.
    assert pipeline.runtime.api("POST", f"{path}/approve") == (
        409,
        {
            "statusCode": 409,
            "message": f"{asked['approval_id']} waits for an answer, not a decision: POST {path}/answer",
        },
    )
    # Another caller cannot see it: unknown.
    assert pipeline.runtime.api("POST", f"{path}/answer", {"answer": "Paris"}, caller=OTHER)[0] == 404
    # Free text is a non-blank string.
    status, refused = pipeline.runtime.api("POST", f"{path}/answer", {"answer": {"city": "Lyon"}})
    assert (status, refused["message"]) == (400, "invalid answer: a free-text answer is a non-blank string")
    assert pipeline.runtime.api("GET", path)[1]["status"] == "pending"

    status, answered = pipeline.runtime.api("POST", f"{path}/answer", {"answer": "Lyon, please"})
    assert (status, answered["status"], answered["seq"]) == (200, "answered", 3)
    again = pipeline.runtime.api("POST", f"{path}/answer", {"answer": "Paris"})
    assert again[0] == 409
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    assert tool_messages(pipeline, 1) == ["Lyon, please"]
    shown = pipeline.runtime.api("GET", path)[1]
    assert (shown["status"], shown["answer_preview"], shown["decided_by"]) == (
        "answered",
        "Lyon, please",
        LOCAL_CALLER,
    )
    results = [m for m in history(pipeline, run_id) if m["kind"] == "tool_result"]
    assert [(m["seq"], m["content"]) for m in results] == [(3, "Lyon, please")]


def test_a_form_answer_is_checked_against_the_result_schema(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("choose_seats", question="How many?")]), Reply(content="Done."))
    run_id = pipeline.start("book seats", agent="deferring")
    asked = waiting(pipeline)
    assert asked["result_schema"]["required"] == ["seats"]
    path = f"/approvals/{asked['approval_id']}/answer"
    status, refused = pipeline.runtime.api("POST", path, {"answer": {"seats": "two"}})
    assert (status, refused["message"]) == (
        400,
        "invalid answer: answer.seats: 'two' is not of type 'integer'",
    )
    too_big = pipeline.runtime.api("POST", path, {"answer": {"seats": 2, "note": "x" * 70_000}})
    assert too_big == (400, {"statusCode": 400, "message": "invalid answer: longer than 65,536 characters"})
    assert pipeline.runtime.api("GET", f"/approvals/{asked['approval_id']}")[1]["status"] == "pending"
    assert [m["kind"] for m in history(pipeline, run_id)] == ["user", "assistant"]  # nothing written

    assert pipeline.runtime.api("POST", path, {"answer": {"seats": 2, "window": True}})[0] == 200
    pipeline.finish(run_id)
    assert tool_messages(pipeline, 1) == ['{"seats": 2, "window": true}']


def _client_call(pipeline: Pipeline) -> tuple[str, dict[str, Any]]:
    pipeline.script(Reply(tool_calls=[call("read_clipboard", format="text")]), Reply(content="Got it."))
    run_id = pipeline.start("what is on my clipboard?", agent="deferring")
    return run_id, waiting(pipeline)


def test_a_client_result_reaches_the_model_once(pipeline: Pipeline) -> None:
    run_id, pending = _client_call(pipeline)
    assert (pending["kind"], pending["seq"], pending["tool"]) == ("client", 3, "read_clipboard")
    result = f"/runs/{run_id}/calls/3/result"
    assert pipeline.runtime.api("POST", result, {"result": {"text": "hi"}}, caller=OTHER)[0] == 404
    assert (
        pipeline.runtime.api("POST", f"/runs/{run_id}/calls/2/result", {"result": {"text": "hi"}})[0] == 404
    )
    assert (
        pipeline.runtime.api("POST", f"/approvals/{pending['approval_id']}/answer", {"answer": "x"})[0] == 409
    )
    status, refused = pipeline.runtime.api("POST", result, {"result": {"txt": "hi"}})
    assert (status, refused["message"]) == (400, "invalid result: result: 'text' is a required property")
    status, refused = pipeline.runtime.api("POST", result, {"result": {"text": "hi"}, "error": "both"})
    assert status == 400 and refused["message"].startswith("invalid result request: body: ")
    assert pipeline.runtime.api("POST", result, {"result": "x" * 70_000})[0] == 400
    assert pipeline.runtime.api("GET", f"/approvals/{pending['approval_id']}")[1]["status"] == "pending"

    status, answered = pipeline.runtime.api("POST", result, {"result": {"text": "hello from the client"}})
    assert (status, answered["status"], answered["seq"]) == (200, "answered", 3)
    assert pipeline.runtime.api("POST", result, {"error": "too late"})[0] == 409
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    assert tool_messages(pipeline, 1) == ['{"text": "hello from the client"}']
    assert "read_clipboard" not in CALLS.counts  # no worker ran it


def test_a_client_error_is_what_the_model_reads(pipeline: Pipeline) -> None:
    run_id, _ = _client_call(pipeline)
    status, _ = pipeline.runtime.api("POST", f"/runs/{run_id}/calls/3/result", {"error": "clipboard locked"})
    assert status == 200
    body = pipeline.finish(run_id)
    assert tool_messages(pipeline, 1) == ["Error: clipboard locked"]
    assert body["executions"][0]["error_type"] == "ClientError"


def test_an_unanswered_call_expires_and_the_model_is_told(short_waits: Pipeline) -> None:
    pipeline = short_waits
    pipeline.script(Reply(tool_calls=[call("ask_user", question="Which city?")]), Reply(content="No answer."))
    run_id = pipeline.start("book a trip", agent="deferring")
    body = pipeline.finish(run_id)

    [told] = tool_messages(pipeline, 1)
    assert told.startswith("Error: no answer came in time: the call to 'ask_user' waited for a person until ")
    assert body["executions"][0]["error_type"] == "NoAnswer"
    _, listed = pipeline.runtime.api("GET", "/approvals")
    [expired] = listed["approvals"]
    assert expired["status"] == "expired"
    late = pipeline.runtime.api("POST", f"/approvals/{expired['approval_id']}/answer", {"answer": "Lyon"})
    assert late[0] == 409
    assert [m["seq"] for m in history(pipeline, run_id) if m["kind"] == "tool_result"] == [3]


def test_ordinary_calls_complete_while_a_deferred_one_waits_and_the_model_reads_all_three_in_order(
    pipeline: Pipeline,
) -> None:
    pipeline.script(
        Reply(
            tool_calls=[
                call("count_once", label="first"),
                call("ask_user", question="Aisle or window?"),
                call("count_once", label="third"),
            ]
        ),
        Reply(content="Done."),
    )
    run_id = pipeline.start("three calls", agent="deferring")
    asked = waiting(pipeline)
    deadline = time.monotonic() + 20
    while {m["seq"] for m in history(pipeline, run_id) if m["kind"] == "tool_result"} != {3, 5}:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert CALLS.counts == {"count_once": 2}
    assert len(pipeline.model.requests) == 1  # not asked again while a call waits

    pipeline.runtime.api("POST", f"/approvals/{asked['approval_id']}/answer", {"answer": "window"})
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    messages = pipeline.model.requests[1]["messages"]
    calls = [c["id"] for c in messages[-4]["tool_calls"]]
    tools = [m for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == calls
    assert [m["content"] for m in tools] == ["counted first", "window", "counted third"]
    assert len(pipeline.model.requests) == 2


def test_the_events_say_what_each_call_waits_for_and_carry_no_token(pipeline: Pipeline) -> None:
    read = subscribe(pipeline.runtime)
    long_format = "x" * 9_000  # over the event's 8,192 characters of arguments
    pipeline.script(
        Reply(
            tool_calls=[
                call("read_clipboard", format="text"),
                call("read_clipboard", format=long_format),
                call("ask_user", question="Which city?"),
            ]
        ),
        Reply(content="Done."),
    )
    run_id = pipeline.start("go", agent="deferring")
    waiting = lambda events: len(of(events, "ToolCallRequested")) == 2 and of(events, "ApprovalRequested")  # noqa: E731
    events = read(waiting)
    validate(events)
    assert "token" not in json.dumps([e["detail"] for e in events]).lower()
    short, long = sorted(of(events, "ToolCallRequested"), key=lambda d: d["slot"])
    assert (short["slot"], short["tool"], short["arguments"], short["result_path"]) == (
        3,
        "read_clipboard",
        {"format": "text"},
        f"/runs/{run_id}/calls/3/result",
    )
    assert short["result_schema"]["required"] == ["text"]
    assert (long["slot"], long["arguments"], long["arguments_chars"], long["arguments_path"]) == (
        4,
        None,
        len(json.dumps({"format": long_format})),
        f"/runs/{run_id}/messages/2",
    )
    [asked] = of(events, "ApprovalRequested")
    assert (asked["kind"], asked["question"], asked["slot"]) == ("human", "Which city?", 5)

    for slot in (3, 4):
        assert (
            pipeline.runtime.api(
                "POST", short["result_path"].replace("/3/", f"/{slot}/"), {"result": {"text": "t"}}
            )[0]
            == 200
        )
    pipeline.runtime.api("POST", f"/approvals/{asked['approval_id']}/answer", {"answer": "Lyon"})
    pipeline.finish(run_id)
    assert tool_messages(pipeline, 1) == ['{"text": "t"}', '{"text": "t"}', "Lyon"]


def test_an_answer_for_a_tool_that_changed_while_its_call_waited_fails_closed(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline.script(
        Reply(tool_calls=[call("ask_user", question="Which city?")]), Reply(content="Asking again.")
    )
    run_id = pipeline.start("book a trip", agent="deferring")
    asked = waiting(pipeline)
    # A deploy while the call waits: the question's tool now means something else.
    changed = dataclasses.replace(ask_user, description="Ask the user for their card number.")
    redeployed = dataclasses.replace(
        DEFERRING, tools=[changed, choose_seats, read_clipboard, *TEST_AGENT.tools]
    )
    monkeypatch.setitem(AGENTS, DEFERRING.name, redeployed)

    status, refused = pipeline.runtime.api(
        "POST", f"/approvals/{asked['approval_id']}/answer", {"answer": "Lyon"}
    )
    assert (status, refused["message"]) == (
        409,
        f"the tool 'ask_user' changed while call {asked['approval_id']} waited: the model was told to ask again",
    )
    body = pipeline.finish(run_id)
    assert tool_messages(pipeline, 1) == [
        "Error: the tool 'ask_user' changed while its call waited for an answer; ask again."
    ]
    assert body["executions"][0]["error_type"] == "ToolChanged"
    assert pipeline.runtime.api("GET", f"/approvals/{asked['approval_id']}")[1]["status"] == "expired"


def test_a_tool_waits_its_own_time(pipeline: Pipeline) -> None:
    # The settings' default is a day; this tool's wait_seconds is two seconds.
    pipeline.script(Reply(tool_calls=[call("quick_question", question="Now?")]), Reply(content="Too late."))
    run_id = pipeline.start("quick", agent="deferring")
    asked = waiting(pipeline)
    created = datetime.fromisoformat(asked["created_at"])
    # Two seconds from when the waiting task started, a moment before the request was stored.
    assert timedelta(0) < datetime.fromisoformat(asked["expires_at"]) - created <= timedelta(seconds=2)
    body = pipeline.finish(run_id, timeout=20)
    assert body["executions"][0]["error_type"] == "NoAnswer"


def test_a_long_answer_is_cut_for_the_model_as_a_workers_result_is(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(AGENTS, DEFERRING.name, dataclasses.replace(DEFERRING, max_result_chars=20))
    run_id, _ = _client_call(pipeline)
    text = "clipboard " * 100
    assert (
        pipeline.runtime.api("POST", f"/runs/{run_id}/calls/3/result", {"result": {"text": text}})[0] == 200
    )
    body = pipeline.finish(run_id)
    [shown] = tool_messages(pipeline, 1)
    whole = json.dumps({"text": text})
    assert shown.startswith(whole[:20] + "\n[… result truncated: ")
    [execution] = body["executions"]
    assert execution["full_result_url"]


def test_a_call_that_expired_is_read_in_its_place_among_the_turns_results(short_waits: Pipeline) -> None:
    # The next model step writes the expired call's result after the ordinary call's result.
    pipeline = short_waits
    pipeline.script(
        Reply(tool_calls=[call("ask_user", question="Which city?"), call("count_once", label="second")]),
        Reply(content="Done."),
    )
    run_id = pipeline.start("two calls", agent="deferring")
    pipeline.finish(run_id)

    messages = pipeline.model.requests[1]["messages"]
    calls = [c["id"] for m in messages if m.get("tool_calls") for c in m["tool_calls"]]
    tools = [m for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == calls
    assert tools[0]["content"].startswith("Error: no answer came in time")
    assert tools[1]["content"] == "counted second"


def test_eleven_waiting_calls_hold_back_none_of_the_turns_other_calls(pipeline: Pipeline) -> None:
    # A Map bound of 10 would be filled by the waiting branches: the ordinary call would never run.
    big_turn = dataclasses.replace(DEFERRING, name="big_turn", max_calls_per_turn=12)
    AGENTS[big_turn.name] = big_turn
    try:
        pipeline.script(
            Reply(
                tool_calls=[
                    *[call("read_clipboard", format=f"f{i}") for i in range(11)],
                    call("count_once", label="last"),
                ]
            ),
            Reply(content="Done."),
        )
        run_id = pipeline.start("a big turn", agent="big_turn")
        deadline = time.monotonic() + 20
        while True:
            pending = pipeline.runtime.api("GET", "/approvals?status=pending")[1]["approvals"]
            ran = [m for m in history(pipeline, run_id) if m["kind"] == "tool_result"]
            if len(pending) == 11 and ran:
                break
            assert time.monotonic() < deadline, (len(pending), ran)
            time.sleep(0.05)
        assert [m["content"] for m in ran] == ["counted last"]
        for waiting_call in pending:
            seq = waiting_call["seq"]
            status, body = pipeline.runtime.api(
                "POST", f"/runs/{run_id}/calls/{seq}/result", {"result": {"text": f"clip {seq}"}}
            )
            assert status == 200, body
        pipeline.finish(run_id)
    finally:
        del AGENTS[big_turn.name]

    told = tool_messages(pipeline, 1)
    assert told == [*[json.dumps({"text": f"clip {seq}"}) for seq in range(3, 14)], "counted last"]


def test_an_agent_whose_calls_wait_cannot_run_as_a_tool(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its child run would wait for days while the parent's call beats a 900 s heartbeat.
    parent = Agent(name="parent", instructions="x", tools=[agent_tool("deferring")])
    monkeypatch.setitem(AGENTS, parent.name, parent)
    assert waiting_child([parent], AGENTS) == (
        "agent 'parent': tool 'deferring' runs agent 'deferring', whose calls may wait for a person or a "
        "program; an agent tool's agent cannot (give those tools to the parent agent)"
    )
    pipeline.script(Reply(tool_calls=[call("deferring", task="ask the user")]), Reply(content="ok"))
    run_id = pipeline.start("go", agent="parent")
    body = pipeline.finish(run_id)

    [told] = tool_messages(pipeline, 1)
    assert told.startswith(
        "Error: agent 'parent': tool 'deferring' runs agent 'deferring', whose calls may wait"
    )
    assert body["executions"][0]["error_type"] == "AgentWaitsError"
    assert pipeline.runtime.api("GET", "/approvals")[1]["approvals"] == []
    assert len(pipeline.model.requests) == 2  # no child run asked the model


class _NoDeletes(Hooks):
    """Blocks every delete, rewrites one question; records what the hooks saw."""

    def __init__(self) -> None:
        super().__init__(name="no-deletes")
        self.seen: list[tuple[str, str]] = []

    def before_tool(self, event: BeforeTool) -> None:
        self.seen.append(("before", event.call.name))
        if event.call.name == "delete_file":
            event.blocked = "deleting is not allowed here"
        elif "rewrite" in event.call.arguments:
            event.call = event.call.model_copy(update={"arguments": '{"question": "something else"}'})

    def after_tool(self, event: AfterTool) -> None:
        self.seen.append(("after", event.execution.content))


delete_file = schema_tool(
    {
        "name": "delete_file",
        "description": "Delete a file on the user's machine.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    deferred="client",
)


def test_before_tool_hooks_can_block_a_deferred_call_before_it_waits(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks = _NoDeletes()
    hooked = Agent(name="hooked", instructions="x", tools=[delete_file, ask_user], hooks=[hooks])
    monkeypatch.setitem(AGENTS, hooked.name, hooked)
    read = subscribe(pipeline.runtime)
    pipeline.script(
        Reply(
            tool_calls=[
                call("delete_file", path="/home/ana/thesis.tex"),
                call("ask_user", question="rewrite me"),
                call("ask_user", question="Which city?"),
            ]
        ),
        Reply(content="ok"),
    )
    run_id = pipeline.start("go", agent="hooked")
    asked = waiting(pipeline)  # the one call the hooks let wait
    assert asked["tool"] == "ask_user" and asked["seq"] == 5
    pipeline.runtime.api("POST", f"/approvals/{asked['approval_id']}/answer", {"answer": "Lyon"})
    pipeline.finish(run_id)

    assert tool_messages(pipeline, 1) == [
        "Error: Blocked: deleting is not allowed here",
        "Error: Blocked: a before_tool hook changed this call, which waits for an answer from outside; "
        "it was not asked.",
        "Lyon",
    ]
    assert ("after", "Error: Blocked: deleting is not allowed here") in hooks.seen
    assert ("after", "Lyon") in hooks.seen  # the answer passed after_tool, as a worker's result does
    events = read(lambda events: bool(of(events, "ApprovalRequested")))
    assert of(events, "ToolCallRequested") == [] and len(of(events, "ApprovalRequested")) == 1


def test_a_waiting_run_says_who_it_waits_for(pipeline: Pipeline) -> None:
    """Issue 35, item 4: `running` alone does not say a run waits; `waiting_for` does, in the
    run, the list and the events, without polling /approvals."""
    read = subscribe(pipeline.runtime)
    pipeline.script(
        Reply(tool_calls=[call("read_clipboard", format="text")]),
        Reply(tool_calls=[call("ask_user", question="Which city?")]),
        Reply(content="Lyon it is."),
    )
    run_id = pipeline.start("go", agent="deferring")

    def said() -> tuple[str, str | None, str | None]:
        run = pipeline.runtime.api("GET", f"/runs/{run_id}")[1]["run"]
        [listed] = [r for r in pipeline.runtime.api("GET", "/runs")[1]["runs"] if r["run_id"] == run_id]
        return run["status"], run["waiting_for"], listed["waiting_for"]

    program = waiting(pipeline)
    assert said() == ("running", "program", "program")
    pipeline.runtime.api("POST", f"/runs/{run_id}/calls/{program['seq']}/result", {"result": {"text": "x"}})
    deadline = time.monotonic() + 20
    while (person := waiting(pipeline))["approval_id"] == program["approval_id"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert said() == ("running", "person", "person")
    pipeline.runtime.api("POST", f"/approvals/{person['approval_id']}/answer", {"answer": "Lyon"})
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    assert said() == ("succeeded", None, None)

    events = read(lambda events: bool(of(events, "RunCompleted")))
    validate(events)
    assert [e["waiting_for"] for e in of(events, "ToolCallRequested")] == ["program"]
    assert [e["waiting_for"] for e in of(events, "ApprovalRequested")] == ["person"]
