"""Declaring deferred tools, and what their answers may be (issue 9, item 7)."""

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tests.unit.shared.runs.test_approvals import APPROVER, _deliver
from toolpipe.infra.cdk.definition import build_definition, loop_states
from toolpipe.shared.agents import AGENTS, Agent
from toolpipe.shared.deferred.answers import answer_content, question_of
from toolpipe.shared.deferred.bodies import ResultRequest
from toolpipe.shared.deferred.models import ApprovalKind, InvalidAnswerError
from toolpipe.shared.errors import DefinitionError, ErrorKind
from toolpipe.shared.settings import WAITING_CALLS_PER_TURN
from toolpipe.shared.tools import SchemaError, schema_tool, tool
from toolpipe.shared.tools.tool import MAX_WAIT_SECONDS


class Booking(BaseModel):
    city: str
    nights: int


def test_a_human_input_tool_is_a_typed_function_whose_body_never_runs() -> None:
    @tool(deferred="human", wait_seconds=7 * 86_400, result_schema=Booking)
    def ask_booking(question: str) -> str:
        """Ask the user where and how long to stay.

        Args:
            question: What to ask.
        """
        raise NotImplementedError

    assert ask_booking.deferred == "human"
    assert ask_booking.wait_timeout(86_400) == 7 * 86_400
    # The model sees an ordinary tool; the answer's form is a JSON Schema.
    assert ask_booking.spec()["function"]["parameters"]["required"] == ["question"]
    assert ask_booking.result_schema == Booking.model_json_schema()


def test_a_client_tool_is_a_schema_without_a_handler() -> None:
    locate = schema_tool(
        {"name": "locate", "description": "Where the user's device is.", "parameters": {"type": "object"}},
        deferred="client",
    )
    assert (locate.deferred, locate.result_schema, locate.wait_timeout(60)) == ("client", None, 60)
    with pytest.raises(SchemaError, match="needs a handler, unless it is deferred"):
        schema_tool({"name": "locate", "description": "Where.", "parameters": {"type": "object"}})


def _declare(**options: Any) -> None:
    @tool(**options)
    def ask(question: str) -> str:
        """Ask.

        Args:
            question: What.
        """
        return question


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"deferred": "robot"}, "deferred is 'human' or 'client', not 'robot'"),
        ({"deferred": "human", "wait_seconds": 0}, "wait_seconds is a whole number of seconds from 1 to"),
        ({"deferred": "human", "wait_seconds": MAX_WAIT_SECONDS + 1}, "(a year)"),
        ({"deferred": "human", "wait_seconds": 1.5}, "wait_seconds is a whole number"),
        ({"deferred": "human", "requires_approval": True}, "cannot also require approval"),
        ({"wait_seconds": 60}, "wait_seconds and result_schema are for deferred tools"),
        ({"result_schema": {"type": "string"}}, "are for deferred tools"),
        ({"deferred": "client", "result_schema": {"type": 5}}, "invalid result_schema at type"),
        (
            {
                "deferred": "client",
                "result_schema": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}},
            },
            "result_schema $ref '#/nope' points nowhere",
        ),
        (
            {
                "deferred": "human",
                "result_schema": {"prefixItems": [{"$ref": "#/$defs/Missing"}], "$defs": {}},
            },
            "result_schema $ref '#/$defs/Missing' points nowhere",
        ),
        (
            {"deferred": "client", "result_schema": {"$ref": "https://example.com/seats.json"}},
            "result_schema $ref 'https://example.com/seats.json' is not local (use '#/$defs/...')",
        ),
        (
            {"deferred": "client", "result_schema": [1]},
            "result_schema is a JSON Schema (dict) or a pydantic model",
        ),
    ],
)
def test_a_bad_declaration_is_one_line_at_import(options: dict[str, Any], error: str) -> None:
    with pytest.raises(DefinitionError, match=re.escape(error)):
        _declare(**options)


def test_local_refs_that_resolve_are_a_valid_result_schema() -> None:
    _declare(deferred="client", result_schema=Booking)  # pydantic's own $defs
    _declare(
        deferred="client",
        result_schema={
            "type": "object",
            "properties": {"n": {"$ref": "#/$defs/N"}, "$ref": {"type": "string"}},
            "enum": [{"$ref": "data, not a reference"}],
            "$defs": {"N": {"type": "integer"}},
        },
    )


def test_a_schema_that_cannot_be_checked_is_one_line_at_answer_time() -> None:
    # A schema stored before the declaration check (or built around it) never makes a 500.
    with pytest.raises(
        InvalidAnswerError, match=r"^invalid result: the tool's result_schema cannot be checked"
    ):
        answer_content(ApprovalKind.CLIENT, {"properties": {"a": {"$ref": "#/nope"}}}, {"a": 1}, "result")


def test_a_free_text_answer_is_a_non_blank_string_passed_as_is() -> None:
    assert answer_content(ApprovalKind.HUMAN, None, "Lyon", "answer") == "Lyon"
    for bad in ("  ", 3, {"city": "Lyon"}):
        with pytest.raises(InvalidAnswerError, match="a free-text answer is a non-blank string"):
            answer_content(ApprovalKind.HUMAN, None, bad, "answer")


def test_a_form_answer_matches_its_schema_and_reads_as_json() -> None:
    schema = Booking.model_json_schema()
    assert answer_content(ApprovalKind.HUMAN, schema, {"city": "Lyon", "nights": 2}, "answer") == (
        '{"city": "Lyon", "nights": 2}'
    )
    with pytest.raises(
        InvalidAnswerError, match=r"^invalid answer: answer.nights: 'two' is not of type 'integer'$"
    ):
        answer_content(ApprovalKind.HUMAN, schema, {"city": "Lyon", "nights": "two"}, "answer")


def test_a_programs_result_is_any_json_within_the_cap() -> None:
    assert answer_content(ApprovalKind.CLIENT, None, [1, "é"], "result") == '[1, "é"]'
    assert answer_content(ApprovalKind.CLIENT, None, "plain", "result") == "plain"
    with pytest.raises(InvalidAnswerError, match=r"^invalid result: longer than 65,536 characters$"):
        answer_content(ApprovalKind.CLIENT, None, "x" * 65_537, "result")
    with pytest.raises(InvalidAnswerError, match="not plain JSON"):
        answer_content(ApprovalKind.CLIENT, None, float("nan"), "result")


def test_a_result_request_is_a_result_or_an_error_never_both() -> None:
    assert ResultRequest.model_validate({"result": None}).model_fields_set == {"result"}
    assert ResultRequest.model_validate({"error": "boom"}).error == "boom"
    # A null error is an absent one (clients that send every field): the result is the answer.
    assert ResultRequest.model_validate({"result": 1, "error": None}).result == 1
    for bad in ({}, {"error": None}, {"result": 1, "error": "boom"}, {"error": ""}, {"answer": 1}):
        with pytest.raises(ValueError):
            ResultRequest.model_validate(bad)


def test_the_question_is_the_question_argument_else_the_arguments() -> None:
    assert question_of('{"question": "Which city?"}') == "Which city?"
    assert question_of('{"topic": "trip", "when": 1}') == '{"topic":"trip","when":1}'
    assert len(question_of('{"question": "' + "?" * 5000 + '"}')) == 2000


def test_the_docs_example_declares_what_it_says() -> None:
    snippet = Path(__file__).resolve().parents[4] / "docs" / "snippets" / "deferred_tools.py"
    namespace: dict[str, Any] = {"__name__": "docs"}
    exec(compile(snippet.read_text(), str(snippet), "exec"), namespace)
    assert [t.name for t in namespace["travel"].tools] == ["ask_user", "choose_seats", "read_clipboard"]


def test_a_deferred_call_waits_in_the_gated_map_and_is_never_dispatched() -> None:
    branch = loop_states(build_definition())["RunGatedTools"]["ItemProcessor"]["States"]
    routes = {
        (c["Variable"], str(c.get("StringEquals", c.get("BooleanEquals")))): c["Next"]
        for c in branch["NeedsApproval"]["Choices"]
    }
    assert routes == {
        ("$.call.needs_approval", "True"): "WaitForApproval",
        ("$.call.deferred", "human"): "WaitForResult",
        ("$.call.deferred", "client"): "WaitForResult",
    }
    wait = branch["WaitForResult"]
    assert wait["Resource"] == "arn:aws:states:::lambda:invoke.waitForTaskToken"
    assert wait["Parameters"]["Payload"]["kind.$"] == "$.call.deferred"
    assert wait["TimeoutSecondsPath"] == "$.call.approval_timeout_seconds"
    assert "HeartbeatSecondsPath" not in wait  # AWS: a heartbeat shorter than the timeout, or none
    # Its output is the branch's outcome; unanswered, the Catch ends the branch: no Dispatch.
    assert wait["End"] is True and "Next" not in wait and "ResultPath" not in wait
    assert wait["Catch"][0]["Next"] == "NotAnswered" and branch["NotAnswered"]["End"] is True


@tool(deferred="client")
def send(to: str, amount: int) -> str:
    """Send money from the user's own banking app.

    Args:
        to: Who.
        amount: How much.
    """
    raise AssertionError("never run")


def test_a_worker_that_gets_a_deferred_call_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(AGENTS, APPROVER.name, dataclasses.replace(APPROVER, tools=[send]))
    result = _deliver(None)
    assert result.error_type is ErrorKind.NOT_APPROVED
    assert result.content == (
        "Error: not run: 'send' is answered from outside (a person or the caller's program), never run by a worker."
    )


def test_an_agent_whose_calls_wait_keeps_its_turns_within_the_maps_40_branches() -> None:
    # The gated Map runs a turn's calls all at once (AWS: 40 at most for an inline Map), so a
    # waiting call never holds back another; a bigger turn could, and is refused where written.
    states = loop_states(build_definition())
    assert states["RunGatedTools"]["MaxConcurrency"] == WAITING_CALLS_PER_TURN == 40
    assert states["RunTools"]["MaxConcurrency"] == 10  # dispatches only: the workers' share
    waiting = schema_tool(
        {"name": "read_clipboard", "description": "Read it.", "parameters": {"type": "object"}},
        deferred="client",
    )
    Agent(name="wide", instructions="x", tools=[waiting], max_calls_per_turn=40)
    with pytest.raises(
        DefinitionError, match=r"^agent 'wide': max_calls_per_turn is at most 40 for an agent"
    ):
        Agent(name="wide", instructions="x", tools=[waiting], max_calls_per_turn=41)
    Agent(
        name="wide",
        instructions="x",
        tools=[dataclasses.replace(waiting, deferred=None)],
        max_calls_per_turn=41,
    )
