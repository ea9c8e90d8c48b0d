"""The runs API beyond starting a run: input and metadata, listing, cancelling (issue 8, item 1)."""

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import TEST_AGENT, Pipeline, _pipeline, call
from toolpipe.infra.local.runtime import LOCAL_CALLER
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS, Agent, agent_tool

ADMIN = "arn:aws:iam::000000000000:role/admin"
BOB = "arn:aws:iam::000000000000:user/bob"


@pytest.fixture
def admin_pipeline() -> Iterator[Pipeline]:
    yield from _pipeline({"TOOLPIPE_ADMIN_PRINCIPAL": ADMIN})


def _metas(pipeline: Pipeline) -> dict[str, dict[str, Any]]:
    items = pipeline.runtime.dynamodb.scan(TableName="toolpipe-local")["Items"]
    return {i["run_id"]["S"]: i for i in items if i["sk"]["S"] == "META"}


def _wait(predicate: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_input_and_metadata_are_kept_and_prompt_still_works(pipeline: Pipeline) -> None:
    pipeline.script(Reply(content="one"), Reply(content="two"))
    status, started = pipeline.runtime.api(
        "POST", "/runs", {"input": "hi", "agent": "tester", "metadata": {"ticket": "T-42", "team": "ops"}}
    )
    assert status == 202
    assert started["status_url"].endswith(f"/runs/{started['run_id']}")
    run = pipeline.finish(started["run_id"])
    assert run["run"]["metadata"] == {"ticket": "T-42", "team": "ops"}
    assert run["messages"][0]["content"] == "hi"
    # The former name of the field still starts a run.
    status, legacy = pipeline.runtime.api("POST", "/runs", {"prompt": "hello", "agent": "tester"})
    assert status == 202
    assert pipeline.finish(legacy["run_id"])["messages"][0]["content"] == "hello"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"input": "hi", "prompt": "hi"}, "send input or prompt"),
        ({"input": "hi", "metadata": {"has space": "v"}}, "metadata.has space.[key]: String should match"),
        ({"input": "hi", "metadata": {"k": "v" * 257}}, "metadata.k: String should have at most 256"),
        (
            {"input": "hi", "metadata": {f"k{i}": "v" for i in range(17)}},
            "metadata: Dictionary should have at most 16",
        ),
        ({"input": "hi", "metadata": {"k": 1}}, "metadata.k: Input should be a valid string"),
        ({"input": "hi", "metadata": ["k"]}, "metadata: Input should be an object"),
        ({"agent": "tester"}, "input: Field required"),
    ],
)
def test_bad_input_or_metadata_is_a_field_level_400_and_writes_nothing(
    pipeline: Pipeline, body: dict[str, Any], expected: str
) -> None:
    status, answer = pipeline.runtime.api("POST", "/runs", body)
    assert status == 400 and expected in answer["message"], answer
    assert pipeline.runtime.dynamodb.scan(TableName="toolpipe-local")["Items"] == []


def test_runs_are_listed_newest_first_filtered_and_paged(admin_pipeline: Pipeline) -> None:
    pipeline = admin_pipeline
    pipeline.script(*[Reply(content=f"answer {i}") for i in range(4)])
    first = pipeline.start("one")
    pipeline.finish(first)
    second = pipeline.start("two", agent="assistant")
    pipeline.finish(second)
    third = pipeline.start("three")
    pipeline.finish(third)
    bobs = pipeline.start("bob's", caller=BOB)
    pipeline.finish(bobs)

    def listing(query: str = "", caller: str = LOCAL_CALLER) -> tuple[int, Any]:
        return pipeline.runtime.api("GET", f"/runs{query}", caller=caller)

    status, page = listing()
    assert status == 200
    assert [r["run_id"] for r in page["runs"]] == [third, second, first] and page["next"] is None
    assert page["runs"][0]["status"] == "succeeded" and page["runs"][0]["links"]["self"] == f"/runs/{third}"
    assert [r["run_id"] for r in listing("?agent=tester")[1]["runs"]] == [third, first]
    assert listing("?status=running")[1]["runs"] == []
    # Page by page with the opaque token.
    seen, query = [], "?limit=1"
    while True:
        status, page = listing(query)
        assert status == 200 and len(page["runs"]) <= 1
        seen += [r["run_id"] for r in page["runs"]]
        if page["next"] is None:
            break
        query = f"?limit=1&next={page['next']}"
    assert seen == [third, second, first]
    # A token is a position, never a caller: an edited one is a 400, and Alice's in Bob's
    # listing reads only Bob's runs.
    _, bob_page = listing("?limit=1", caller=BOB)
    assert [r["run_id"] for r in bob_page["runs"]] == [bobs]
    _, alice_page = listing("?limit=1")
    for forged in ("garbage!", "e30", alice_page["next"][:-2] + "xx", alice_page["next"] + "AAAA"):
        status, body = listing(f"?next={forged}", caller=BOB)
        assert status == 400 and "next" in body["message"], (forged, body)
    status, body = listing(f"?next={alice_page['next']}", caller=BOB)
    assert status == 200 and {r["run_id"] for r in body["runs"]} <= {bobs}
    for bad, field in (("?status=done", "status"), ("?limit=0", "limit"), ("?agent=../x", "agent")):
        status, body = listing(bad)
        assert status == 400 and f"query.{field}" in body["message"], body
    # Other callers' runs: only for the admin.
    assert listing(f"?caller={BOB}")[0] == 403
    assert listing("?caller=*")[0] == 403
    assert [r["run_id"] for r in listing(f"?caller={BOB}", caller=ADMIN)[1]["runs"]] == [bobs]
    assert {r["run_id"] for r in listing("?caller=*", caller=ADMIN)[1]["runs"]} == {
        first,
        second,
        third,
        bobs,
    }


@pytest.fixture
def helper(monkeypatch: pytest.MonkeyPatch) -> Agent:
    child = Agent(name="helper", instructions="You wait.", tools=[TEST_AGENT.registry.get("slow")])
    monkeypatch.setitem(AGENTS, "helper", child)
    parent = dataclasses.replace(AGENTS["tester"], tools=[*AGENTS["tester"].tools, agent_tool("helper")])
    monkeypatch.setitem(AGENTS, "tester", parent)
    return child


def _executing(pipeline: Pipeline, run_id: str) -> bool:
    """The run's first call is claimed by a worker: its tool is running."""
    item = pipeline.runtime.dynamodb.get_item(
        TableName="toolpipe-local", Key={"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": "CALL#000003"}}
    )
    return "Item" in item


def test_cancel_stops_a_run_waiting_on_a_slow_tool(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("slow", seconds=1.5)]), Reply(content="never asked"))
    run_id = pipeline.start("wait for it")
    _wait(lambda: _executing(pipeline, run_id))
    asked = len(pipeline.model.requests)
    status, body = pipeline.runtime.api("POST", f"/runs/{run_id}/cancel")
    assert status == 200 and body["run_id"] == run_id and body["status"] == "cancelled"
    assert pipeline.runtime.wait_for_execution(run_id)["status"] == "ABORTED"
    # Cancelling again answers the same; the execution-ended rule kept `cancelled`.
    assert pipeline.runtime.api("POST", f"/runs/{run_id}/cancel") == (200, body)
    # The tool finishes after the cancel: its result is kept, the run stays cancelled, and the
    # model is never asked again.
    _wait(lambda: pipeline.runtime.api("GET", f"/runs/{run_id}")[1]["executions"][0]["status"] == "ok")
    status, run = pipeline.runtime.api("GET", f"/runs/{run_id}")
    assert run["run"]["status"] == "cancelled" and "cancelled by" in run["run"]["error"]
    assert len(pipeline.model.requests) == asked
    _, listed = pipeline.runtime.api("GET", "/runs?status=cancelled")
    assert [r["run_id"] for r in listed["runs"]] == [run_id]


def test_cancel_of_an_ended_unknown_or_foreign_run(pipeline: Pipeline) -> None:
    pipeline.script(Reply(content="done"))
    run_id = pipeline.start("quick")
    assert pipeline.finish(run_id)["run"]["status"] == "succeeded"
    status, body = pipeline.runtime.api("POST", f"/runs/{run_id}/cancel")
    assert status == 409 and "already ended (succeeded)" in body["message"]
    assert pipeline.runtime.api("POST", "/runs/nope/cancel")[0] == 404
    assert pipeline.runtime.api("POST", f"/runs/{run_id}/cancel", caller=BOB)[0] == 404
    assert pipeline.runtime.api("POST", "/runs/bad.id/cancel")[0] == 400
    status, run = pipeline.runtime.api("GET", f"/runs/{run_id}")
    assert run["run"]["status"] == "succeeded"


def test_cancelling_a_parent_cancels_its_running_child(pipeline: Pipeline, helper: Agent) -> None:
    pipeline.script(
        Reply(tool_calls=[call("helper", task="wait a bit")]),  # parent
        Reply(tool_calls=[call("slow", seconds=1.5)]),  # child
        Reply(content="never asked"),
    )
    run_id = pipeline.start("delegate")
    child_id = _wait(lambda: next((r for r in _metas(pipeline) if r != run_id), None))
    _wait(lambda: _executing(pipeline, child_id))
    asked = len(pipeline.model.requests)
    status, body = pipeline.runtime.api("POST", f"/runs/{run_id}/cancel")
    assert status == 200 and body["status"] == "cancelled"
    assert pipeline.runtime.wait_for_execution(run_id)["status"] == "ABORTED"
    assert pipeline.runtime.wait_for_execution(child_id)["status"] == "ABORTED"
    time.sleep(2)  # the child's tool ends: nothing it does may revive either run
    for rid in (run_id, child_id):
        status, run = pipeline.runtime.api("GET", f"/runs/{rid}")
        assert run["run"]["status"] == "cancelled", run["run"]
    assert len(pipeline.model.requests) == asked, [r["messages"][-1] for r in pipeline.model.requests]


def test_cancelling_publishes_run_cancelled_once_per_run(pipeline: Pipeline, helper: Agent) -> None:
    from tests.e2e.test_run_events import of, subscribe, validate

    read = subscribe(pipeline.runtime)
    pipeline.script(
        Reply(tool_calls=[call("helper", task="wait a bit")]),
        Reply(tool_calls=[call("slow", seconds=1)]),
    )
    run_id = pipeline.start("delegate")
    child_id = _wait(lambda: next((r for r in _metas(pipeline) if r != run_id), None))
    _wait(lambda: _executing(pipeline, child_id))
    assert pipeline.runtime.api("POST", f"/runs/{run_id}/cancel")[0] == 200
    assert pipeline.runtime.api("POST", f"/runs/{run_id}/cancel")[0] == 200  # no second event
    pipeline.runtime.wait_for_execution(run_id)
    pipeline.runtime.wait_for_execution(child_id)

    events = read(lambda got: len(of(got, "RunCancelled")) == 2)
    validate(events)
    cancelled = of(events, "RunCancelled")
    assert sorted(e["run_id"] for e in cancelled) == sorted([run_id, child_id])
    assert of(events, "RunFailed") == [] and of(events, "RunCompleted") == []
