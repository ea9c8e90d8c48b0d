"""Forking a run from a turn (`POST /runs/{id}/fork`, `toolpipe fork`): a new run whose history
is the first N turns of the old one, copied, then goes on; no tool of those turns runs again."""

import pytest

from tests.conftest import CALLS, TEST_AGENT, Pipeline, _pipeline, call
from toolpipe.infra.local.runtime import LOCAL_CALLER
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, Agent


def _fork(pipeline: Pipeline, run_id: str, body: object, caller: str = LOCAL_CALLER) -> tuple[int, dict]:
    status, answer = pipeline.runtime.api("POST", f"/runs/{run_id}/fork", body, caller=caller)
    return status, answer


def test_a_fork_keeps_the_first_turns_runs_none_of_their_tools_and_goes_on_with_a_new_input(
    pipeline: Pipeline,
) -> None:
    pipeline.script(
        Reply(tool_calls=[call("count_once", label="a")]),
        Reply(tool_calls=[call("count_once", label="b")]),
        Reply(content="a and b"),
        # The fork's model calls:
        Reply(tool_calls=[call("count_once", label="c")]),
        Reply(content="a and c"),
    )
    run_id = pipeline.start("count")
    assert pipeline.finish(run_id)["run"]["output"] == "a and b"

    status, body = _fork(pipeline, run_id, {"turn": 1, "input": "count c instead of b"})
    assert status == 202, body
    fork_id = body["run_id"]
    fork = pipeline.finish(fork_id)

    assert fork_id != run_id and fork["run"]["status"] == "succeeded" and fork["run"]["output"] == "a and c"
    assert fork["run"]["forked_from"] == {"run_id": run_id, "turn": 1}
    assert CALLS.counts == {"count_once": 3}  # a and b in the run, c in the fork: a never again
    kinds = [(m["kind"], m.get("content")) for m in fork["messages"]]
    assert kinds == [
        ("user", "count"),
        ("assistant", None),
        ("tool_result", "counted a"),
        ("user", "count c instead of b"),
        ("assistant", None),
        ("tool_result", "counted c"),
        ("assistant", "a and c"),
    ]
    # The fork's first model call read the copied turn and the new message.
    roles = [m["role"] for m in pipeline.model.requests[3]["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    _, parent = pipeline.runtime.api("GET", f"/runs/{run_id}", caller=LOCAL_CALLER)
    assert parent["run"]["forks"] == [fork_id]


def test_only_the_owner_forks_and_only_from_a_complete_turn(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    capped = Agent(
        name="capped", instructions=TEST_AGENT.instructions, tools=TEST_AGENT.tools, max_tool_calls=1
    )
    monkeypatch.setitem(AGENTS, capped.name, capped)
    pipeline.script(
        Reply(tool_calls=[call("count_once", label="a")]),
        # Over the limit: its call is never dispatched, so turn 2 has a call without a result.
        Reply(tool_calls=[call("count_once", label="b")]),
        # The fork from turn 1 answers; unscripted, its model call failed only after the
        # client's retries, which the teardown waited for (35 s).
        Reply(content="forked at a"),
    )
    run_id = pipeline.start("count", agent="capped")
    assert pipeline.finish(run_id)["run"]["status"] == "limit"

    assert _fork(pipeline, run_id, {"turn": 1}, caller="arn:aws:iam::000000000000:user/other")[0] == 404
    status, body = _fork(pipeline, run_id, {"turn": 2})
    assert (status, body["message"]) == (
        409,
        f"run {run_id} cannot be forked there: turn 2 has calls without results yet",
    )
    status, body = _fork(pipeline, run_id, {"turn": 7})
    assert (status, body["message"]) == (
        409,
        f"run {run_id} cannot be forked there: its last turn is 2, not 7",
    )
    assert _fork(pipeline, run_id, {"turn": -1})[0] == 400
    status, body = _fork(pipeline, run_id, {"turn": 1})
    assert status == 202, body
    assert pipeline.finish(body["run_id"])["run"]["output"] == "forked at a"


def test_a_fork_counts_against_the_callers_quota_as_a_start_does() -> None:
    for pipeline in _pipeline({"TOOLPIPE_QUOTA_STARTS_PER_MINUTE": "1"}):
        pipeline.script(Reply(content="done"), Reply(content="the fork's answer"))
        run_id = pipeline.start("hello")
        pipeline.finish(run_id)

        status, body = _fork(pipeline, run_id, {"turn": 0})
        assert status == 429 and "runs started a minute" in body["message"], body
        _, parent = pipeline.runtime.api("GET", f"/runs/{run_id}", caller=LOCAL_CALLER)
        assert parent["run"]["forks"] == []  # nothing written
