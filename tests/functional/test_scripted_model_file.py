"""The example's model script (examples/assistant/scripted_model.yaml) through the whole local
pipeline: parallel calls, a handoff, a call the tool refuses, and a prompt it does not script,
which fails the run with the script's own words; a script calling a tool its agent lacks is
refused when it is read."""

from pathlib import Path

import pytest

from tests.conftest import Pipeline
from toolpipe.infra.local.model_script import FileResponder
from toolpipe.shared.agents import AGENTS

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "assistant" / "scripted_model.yaml"


@pytest.fixture(autouse=True)
def example_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    from assistant.agents import assistant, triage

    monkeypatch.setitem(AGENTS, "assistant", assistant)
    monkeypatch.setitem(AGENTS, "triage", triage)


def _tool_results(body: dict) -> list[str]:  # type: ignore[type-arg]
    return [m["content"] for m in body["messages"] if m["kind"] == "tool_result"]


def test_the_example_script_drives_the_example_agents(pipeline: Pipeline) -> None:
    pipeline.model.responder = FileResponder(SCRIPT)
    roots = pipeline.start("What are the square roots of 16 and 81?", agent="assistant")
    handed = pipeline.start("Please hand over the sum of 2 and 3", agent="triage")
    refused = pipeline.start("What is the square root of -4?", agent="assistant")

    body = pipeline.finish(roots)
    assert body["run"]["status"] == "succeeded", body["run"]
    # Two calls in one reply; "16" from the prompt is checked into the tool's float as a
    # model's JSON string would be.
    [turn] = [m for m in body["messages"] if m["kind"] == "assistant" and m.get("tool_calls")]
    assert [c["name"] for c in turn["tool_calls"]] == ["square_root", "square_root"]
    assert body["run"]["output"] == "The square roots: 4.0\n9.0"

    body = pipeline.finish(handed)
    assert body["run"]["status"] == "succeeded", body["run"]
    assert (body["run"]["agent"], body["run"]["active_agent"]) == ("triage", "assistant")
    assert body["run"]["output"] == "2 + 3 = 5.0"

    body = pipeline.finish(refused)
    assert body["run"]["status"] == "succeeded", body["run"]
    [error] = _tool_results(body)
    assert "cannot take the square root of a negative number" in error
    assert body["run"]["output"] == f"I could not: {error}"


def test_a_script_calling_a_tool_its_agent_lacks_fails_the_run_naming_both(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    script = tmp_path / "typo.yaml"
    script.write_text(
        "scripts:\n  - replies:\n      - tool_calls: [{name: square_rot, arguments: {x: 4}}]\n"
        "      - content: '{results}'\n"
    )
    pipeline.model.responder = FileResponder(script, lambda: [AGENTS["assistant"], AGENTS["triage"]])
    body = pipeline.finish(pipeline.start("What is the square root of 4?", agent="assistant"))
    assert body["run"]["status"] == "failed"
    assert body["run"]["error"].endswith(
        f"400 {script}: scripts[0].replies[0].tool_calls[0]: agent 'assistant' has no tool "
        "'square_rot' (did you mean 'square_root'?)"
    )


def test_a_prompt_no_script_matches_fails_the_run_naming_the_file(pipeline: Pipeline) -> None:
    pipeline.model.responder = FileResponder(SCRIPT)
    body = pipeline.finish(pipeline.start("Tell me a joke", agent="assistant"))
    assert body["run"]["status"] == "failed"
    assert body["run"]["error"].endswith(
        f"400 {SCRIPT}: no script's `when` matches the prompt 'Tell me a joke'"
    )
    assert len(pipeline.model.requests) == 1  # refused once, never retried


def test_the_demo_model_fails_a_run_it_cannot_do(pipeline: Pipeline) -> None:
    # The pipeline's default model is the demo: a prompt none of its rules do is a failed run.
    body = pipeline.finish(pipeline.start("What is the weather in Paris?", agent="assistant"))
    assert body["run"]["status"] == "failed"
    assert "the demo model cannot do 'What is the weather in Paris?'" in body["run"]["error"]
    assert len(pipeline.model.requests) == 1
