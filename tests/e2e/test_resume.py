"""Resuming a run that ended failed or limit (`POST /runs/{id}/resume`, `toolpipe resume`): the
same run goes on from its last stored turn in a new execution, and nothing done runs again."""

import time
from typing import Any

import pytest

from tests.conftest import CALLS, TEST_AGENT, Pipeline, call
from tests.e2e.test_run_events import of, subscribe, validate
from toolpipe.infra.local.runtime import LOCAL_CALLER, TABLE
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, Agent
from toolpipe.shared.runs.fork import RunForker
from toolpipe.shared.runs.ports import StepFunctionsStarter


def _agent(monkeypatch: pytest.MonkeyPatch, **limits: Any) -> str:
    agent = Agent(name="capped", instructions=TEST_AGENT.instructions, tools=TEST_AGENT.tools, **limits)
    monkeypatch.setitem(AGENTS, agent.name, agent)
    return agent.name


def _resume(pipeline: Pipeline, run_id: str, body: Any = None, **headers: str) -> tuple[int, Any]:
    return pipeline.runtime.api("POST", f"/runs/{run_id}/resume", body, caller=LOCAL_CALLER, headers=headers)


def _resume_answer(pipeline: Pipeline, run_id: str, body: Any, key: str) -> tuple[int, Any, dict[str, str]]:
    return pipeline.runtime.api_response(
        "POST", f"/runs/{run_id}/resume", body, caller=LOCAL_CALLER, headers={"Idempotency-Key": key}
    )


def test_a_run_stopped_by_a_limit_goes_on_with_the_limit_raised_and_runs_nothing_twice(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = _agent(monkeypatch, max_tool_calls=2)
    read = subscribe(pipeline.runtime)
    pipeline.script(
        Reply(tool_calls=[call("count_once", label="a"), call("count_once", label="b")]),
        # Over the limit: the run ends `limit` before these two are dispatched.
        Reply(tool_calls=[call("count_once", label="c"), call("count_once", label="d")]),
        Reply(content="all four counted"),
    )
    run_id = pipeline.start("count", agent=agent)
    ended = pipeline.finish(run_id)["run"]
    assert ended["status"] == "limit" and "max_tool_calls is 2" in ended["error"]
    assert CALLS.counts == {"count_once": 2}

    status, body = _resume(pipeline, run_id, {"limits": {"max_tool_calls": 10}})
    assert status == 202, body
    assert body["execution"] == 2 and body["status"] == "running"
    run = pipeline.finish(run_id)

    assert run["run"]["status"] == "succeeded" and run["run"]["output"] == "all four counted"
    # The stored reply's calls went out in the new execution; the done ones never again.
    assert CALLS.counts == {"count_once": 4}
    results = [m["content"] for m in run["messages"] if m["kind"] == "tool_result"]
    assert results == [f"counted {label}" for label in "abcd"]
    assert len(pipeline.model.requests) == 3  # the limited reply was decided again, not asked again
    (resume,) = run["run"]["resumes"]
    assert (resume["execution"], resume["turn"], resume["ended"]) == (2, 2, "limit")
    assert resume["limits"]["max_tool_calls"] == 10 and "max_tool_calls" in resume["error"]
    assert run["run"]["limits"]["max_tool_calls"] == 10
    events = read(lambda es: len(of(es, "RunCompleted")) == 2)
    validate(events)
    (resumed,) = of(events, "RunResumed")
    assert (resumed["execution"], resumed["ended"], resumed["limits"]) == (2, "limit", {"max_tool_calls": 10})


def test_a_failed_run_resumes_past_the_failure_and_the_failed_call_is_not_run_again(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = _agent(monkeypatch, on_tool_error="fail")
    pipeline.script(
        Reply(tool_calls=[call("count_once", label="a"), call("explode", reason="card declined")]),
        Reply(content="went on without the card"),
    )
    run_id = pipeline.start("pay", agent=agent)
    assert pipeline.finish(run_id)["run"]["status"] == "failed"

    status, body = _resume(pipeline, run_id)
    assert status == 202, body
    run = pipeline.finish(run_id)

    assert run["run"]["status"] == "succeeded" and run["run"]["output"] == "went on without the card"
    assert CALLS.counts == {"count_once": 1}
    # The model read the turn as it was stored: the failed call's error, once.
    tool_messages = [m for m in pipeline.model.requests[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages][1].startswith("Error:")


def test_a_repeated_resume_with_the_same_key_starts_one_execution(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = _agent(monkeypatch, max_iterations=1)
    pipeline.script(Reply(tool_calls=[call("count_once", label="a")]), Reply(content="done"))
    run_id = pipeline.start("count", agent=agent)
    assert pipeline.finish(run_id)["run"]["status"] == "limit"

    first = _resume_answer(pipeline, run_id, {"limits": {"max_iterations": 2}}, "resume-1")
    again = _resume_answer(pipeline, run_id, {"limits": {"max_iterations": 2}}, "resume-1")
    other = _resume(pipeline, run_id, {"limits": {"max_iterations": 5}}, **{"Idempotency-Key": "resume-1"})
    run = pipeline.finish(run_id)

    assert first[0] == again[0] == 202
    assert "Idempotent-Replayed" not in first[2] and again[2]["Idempotent-Replayed"] == "true"
    # A repeat answers with the run as it is now (shared/runs/views.py `RunResumed`): the same
    # execution, its status where the resumed execution has got to since the first answer.
    assert {**again[1], "status": first[1]["status"]} == first[1]
    assert (first[1]["status"], again[1]["status"]) in {
        ("running", "running"),
        ("running", "succeeded"),
        ("succeeded", "succeeded"),
    }
    assert other[0] == 409 and "already resumed" in other[1]["message"]
    assert run["run"]["status"] == "succeeded" and run["run"]["execution"] == 2
    assert len(run["run"]["resumes"]) == 1


def test_only_a_run_that_ended_failed_or_limit_is_resumed(pipeline: Pipeline) -> None:
    pipeline.script(Reply(content="done"))
    run_id = pipeline.start("hello")
    pipeline.finish(run_id)

    status, body = _resume(pipeline, run_id)
    assert status == 409
    assert body["message"] == (
        f"run {run_id} cannot be resumed: it is succeeded; only a run that ended failed or limit can"
    )
    status, body = _resume(pipeline, run_id, {"limits": {"max_turns": 3}})
    assert status == 400 and "max_turns" in body["message"]
    status, _ = pipeline.runtime.api("POST", f"/runs/{run_id}/resume", None, caller="someone-else")
    assert status == 404


def test_a_run_past_its_retention_is_neither_resumed_nor_forked(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DynamoDB deletes expired items in no order over days: a resumed run missing some results
    would dispatch those calls again. Locally nothing expires, so the stamp is moved back. A
    fork made before, asked again with its key, is answered as it is."""
    agent = _agent(monkeypatch, max_tool_calls=1)
    pipeline.script(
        Reply(tool_calls=[call("count_once", label="a"), call("count_once", label="b")]),
        Reply(content="forked"),  # the fork's answer
        Reply(content="forked, started by its replay"),
    )
    run_id = pipeline.start("count", agent=agent)
    assert pipeline.finish(run_id)["run"]["status"] == "limit"
    fork = ("POST", f"/runs/{run_id}/fork", {"turn": 0})
    status, made, _ = pipeline.runtime.api_response(
        *fork, caller=LOCAL_CALLER, headers={"Idempotency-Key": "f1"}
    )
    assert status == 202, made
    assert pipeline.finish(made["run_id"])["run"]["status"] == "succeeded"
    with monkeypatch.context() as dying:  # a fork whose copy died half-way
        dying.setattr(RunForker, "_copy", lambda self, fork_id, items: 1 / 0)
        status, _ = pipeline.runtime.api(*fork, caller=LOCAL_CALLER, headers={"Idempotency-Key": "f3"})
        assert status == 500
    with monkeypatch.context() as dying:  # a fork copied whole that died before it started
        dying.setattr(StepFunctionsStarter, "start", lambda self, *args, **kwargs: None)
        status, unstarted, _ = pipeline.runtime.api_response(
            *fork, caller=LOCAL_CALLER, headers={"Idempotency-Key": "f4"}
        )
        assert status == 202, unstarted
    until = int(time.time()) - 1
    pipeline.runtime.dynamodb.update_item(
        TableName=TABLE,
        Key={"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "META"}},
        UpdateExpression="SET retain_until = :until",
        ExpressionAttributeValues={":until": {"N": str(until)}},
    )
    expired = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(until))

    status, body = _resume(pipeline, run_id, {"limits": {"max_tool_calls": 10}})
    assert (status, body["message"]) == (
        409,
        f"run {run_id} cannot be resumed: it expired at {expired}, so some of its history may already "
        "be gone; start a new run",
    )
    for key in ("f2", "f3", None):  # a new fork, or one half made: refused
        headers = {"Idempotency-Key": key} if key else {}
        status, body = pipeline.runtime.api(*fork, caller=LOCAL_CALLER, headers=headers)
        assert status == 409, body
        assert body["message"].startswith(f"run {run_id} cannot be forked: it expired at {expired}")
    status, again, headers = pipeline.runtime.api_response(
        *fork, caller=LOCAL_CALLER, headers={"Idempotency-Key": "f1"}
    )
    assert (status, again["run_id"], headers.get("Idempotent-Replayed")) == (202, made["run_id"], "true"), (
        again
    )
    status, again, _ = pipeline.runtime.api_response(
        *fork, caller=LOCAL_CALLER, headers={"Idempotency-Key": "f4"}
    )
    assert (status, again["run_id"]) == (202, unstarted["run_id"]), again
    assert pipeline.finish(unstarted["run_id"])["run"]["output"] == "forked, started by its replay"
    status, body = pipeline.runtime.api(
        "POST",
        f"/runs/{run_id}/fork",
        {"turn": 0, "input": "another"},
        caller=LOCAL_CALLER,
        headers={"Idempotency-Key": "f1"},
    )
    assert status == 409 and "already forked" in body["message"], body
    _, shown = pipeline.runtime.api("GET", f"/runs/{run_id}", caller=LOCAL_CALLER)
    assert shown["run"]["status"] == "limit" and shown["run"]["execution"] == 1
    assert sorted(shown["run"]["forks"]) == sorted([made["run_id"], unstarted["run_id"]])
