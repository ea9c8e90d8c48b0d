"""GetExecutionHistory answers with the events copied as they are (patches/speed/history_answers.py):
the same answers as moto's serializer gives, on the histories real runs write."""

import json
from typing import Any

import pytest
from moto.core.responses import ActionResult

from tests.conftest import TEST_AGENT, Pipeline, call
from toolpipe.infra.local.patches.speed import history_answers
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, Agent


def test_an_execution_history_is_the_serializers_answer_on_real_runs(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[int] = []

    def both(self: history_answers.HistoryAnswer, context: Any) -> Any:
        fast = history_answers.HistoryAnswer.__dict__["_copied"](self, context)
        slow = ActionResult.execute_result(self, context)
        assert fast is not None, "a real history fell back to the serializer"
        assert (fast[0], fast[1], json.loads(fast[2])) == (slow[0], slow[1], json.loads(slow[2]))
        compared.append(len(json.loads(fast[2])["events"]))
        return fast

    monkeypatch.setattr(history_answers.HistoryAnswer, "execute_result", both)
    capped = Agent(name="capped", instructions="", tools=TEST_AGENT.tools, max_tool_calls=1)
    monkeypatch.setitem(AGENTS, capped.name, capped)
    pipeline.script(
        # Calls side by side (the Map), one failing in its tool: a Catch, a Lambda's error.
        Reply(tool_calls=[call("count_once", label="a"), call("explode", reason="on purpose")]),
        Reply(content="done"),
        # A second run ends at its limit.
        Reply(tool_calls=[call("count_once", label="b")]),
        Reply(tool_calls=[call("count_once", label="c")]),
    )
    for agent, status in (("tester", "succeeded"), ("capped", "limit")):
        run_id = pipeline.start("count", agent=agent)
        assert pipeline.finish(run_id)["run"]["status"] == status
        events = pipeline.runtime.execution_events(run_id)
        kinds = {e["type"] for e in events}
        assert {"ExecutionStarted", "MapStateEntered", "TaskStateEntered", "TaskSucceeded"} <= kinds
        assert all(isinstance(e["timestamp"], type(events[0]["timestamp"])) for e in events)
    # Each run's own reads, and the orchestrator's count of each ended execution.
    assert len(compared) >= 4 and min(compared) > 10, compared


def test_a_value_the_copy_does_not_know_goes_the_serializers_way() -> None:
    shape = type("S", (), {"type_name": "structure", "members": {"a": None}})()
    with pytest.raises(history_answers._NotAsBuilt):
        history_answers._as_wire({"b": 1}, shape)
    with pytest.raises(history_answers._NotAsBuilt):
        history_answers._as_wire(["not a dict"], shape)
