"""More than one answer shape (issue #3, item 7): return_direct tools and structured output."""

import dataclasses
import json

import pytest
from pydantic import BaseModel, Field

from tests.conftest import Pipeline, call
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS


class Forecast(BaseModel):
    city: str
    celsius: float = Field(ge=-90, le=60)


@pytest.fixture
def forecaster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        AGENTS,
        "tester",
        dataclasses.replace(
            AGENTS["tester"],
            tools=[t for t in AGENTS["tester"].tools if not t.return_direct],  # never both
            output_type=Forecast,
            max_repair_turns=1,
        ),
    )


def test_a_return_direct_result_is_the_answer(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("render_report", title="Q3")]))
    body = pipeline.finish(pipeline.start("report please"))

    assert body["run"]["status"] == "succeeded"
    assert body["run"]["output"] == "# Q3\nAll good."
    assert len(pipeline.model.requests) == 1  # no model call after the tool


def test_structured_output_is_validated_and_repaired(pipeline: Pipeline, forecaster: None) -> None:
    pipeline.script(
        Reply(content='{"city": "Oslo", "celsius": 451}'),
        Reply(content='```json\n{"city": "Oslo", "celsius": -3.5}\n```'),
    )
    body = pipeline.finish(pipeline.start("weather in Oslo"))

    assert body["run"]["status"] == "succeeded"
    assert json.loads(body["run"]["output"]) == {"city": "Oslo", "celsius": -3.5}
    system = pipeline.model.requests[0]["messages"][0]["content"]
    assert '"celsius"' in system and "reply with only a JSON object" in system
    repair = pipeline.model.requests[1]["messages"][-1]
    assert repair["role"] == "user"
    assert repair["content"] == (
        "Your final answer does not match the required JSON Schema: celsius: Input should be less than or "
        "equal to 60. Reply again with only the JSON object."
    )


def test_structured_output_repairs_are_bounded(pipeline: Pipeline, forecaster: None) -> None:
    pipeline.script(Reply(content="It is cold."), Reply(content="Still cold."), Reply(content="never asked"))
    body = pipeline.finish(pipeline.start("weather in Oslo"))

    assert body["run"]["status"] == "limit"
    assert (
        body["run"]["error"]
        == "the model needed repairing (invalid tool calls or answers) in 2 turns (the agent's max_repair_turns is 1)"
    )
    assert len(pipeline.model.requests) == 2
