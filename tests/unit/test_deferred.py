"""Declaring deferred tools, and what their answers may be (issue 9, item 7)."""

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tests.unit.test_approvals import APPROVER, _deliver
from toolpipe.infra.definition import build_definition
from toolpipe.shared.agents import AGENTS
from toolpipe.shared.approvals.answers import answer_content, question_of
from toolpipe.shared.approvals.models import ApprovalKind, InvalidAnswerError, ResultRequest
from toolpipe.shared.errors import DefinitionError, ErrorKind
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
            {"deferred": "client", "result_schema": [1]},
            "result_schema is a JSON Schema (dict) or a pydantic model",
        ),
    ],
)
def test_a_bad_declaration_is_one_line_at_import(options: dict[str, Any], error: str) -> None:
    with pytest.raises(DefinitionError, match=error.replace("(", r"\(").replace(")", r"\)")):
        _declare(**options)


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
    for bad in ({}, {"result": 1, "error": "boom"}, {"error": ""}, {"answer": 1}):
        with pytest.raises(ValueError):
            ResultRequest.model_validate(bad)


def test_the_question_is_the_question_argument_else_the_arguments() -> None:
    assert question_of('{"question": "Which city?"}') == "Which city?"
    assert question_of('{"topic": "trip", "when": 1}') == '{"topic":"trip","when":1}'
    assert len(question_of('{"question": "' + "?" * 5000 + '"}')) == 2000


def test_the_readme_example_declares_what_it_says() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("### Deferred tools") : readme.index("## Failure handling")]
    [block] = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    namespace: dict[str, Any] = {"__name__": "readme"}
    exec(compile(block, "README.md", "exec"), namespace)
    assert [t.name for t in namespace["travel"].tools] == ["ask_user", "choose_seats", "read_clipboard"]


def test_a_deferred_call_waits_in_the_gated_map_and_is_never_dispatched() -> None:
    branch = build_definition()["States"]["RunGatedTools"]["ItemProcessor"]["States"]
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
    assert (wait["TimeoutSecondsPath"], wait["HeartbeatSecondsPath"]) == (
        "$.call.approval_timeout_seconds",
        "$.call.approval_heartbeat_seconds",
    )
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
