"""The REST API handler, as API Gateway calls it."""

from tests.conftest import Pipeline


def _scan(pipeline: Pipeline) -> list[dict]:
    return sorted(pipeline.runtime.dynamodb.scan(TableName="toolpipe-local")["Items"], key=str)


def test_post_runs_rejects_a_body_that_is_not_json(pipeline: Pipeline) -> None:
    status, body = pipeline.runtime.api("POST", "/runs", "{not json")
    assert status == 400
    assert body["message"].startswith("invalid run request: body: Invalid JSON")


def test_post_runs_names_the_missing_and_unknown_fields(pipeline: Pipeline) -> None:
    status, body = pipeline.runtime.api("POST", "/runs", {"promt": "typo"})
    assert status == 400
    assert "prompt: Field required" in body["message"]
    assert "promt: Extra inputs are not permitted" in body["message"]


def test_post_runs_rejects_an_unknown_agent_and_writes_nothing(pipeline: Pipeline) -> None:
    status, body = pipeline.runtime.api("POST", "/runs", {"prompt": "hi", "agent": "nobody"})
    assert status == 400
    assert body["message"].startswith("unknown agent 'nobody' (known: ")
    assert _scan(pipeline) == []


def test_get_unknown_run_is_404(pipeline: Pipeline) -> None:
    status, body = pipeline.runtime.api("GET", "/runs/does-not-exist")
    assert status == 404
    assert body["message"] == "run does-not-exist not found"


def test_get_never_changes_state(pipeline: Pipeline) -> None:
    run_id = pipeline.start("What is the square root of 16?", agent="assistant")
    pipeline.finish(run_id)
    before = _scan(pipeline)
    for _ in range(3):
        assert pipeline.runtime.api("GET", f"/runs/{run_id}")[0] == 200
    assert _scan(pipeline) == before
