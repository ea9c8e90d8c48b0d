"""The OpenAPI document: generated from the handler, served at /openapi.json, checked in."""

import json
from typing import Any

from tests.conftest import Pipeline
from toolpipe.infra.reference.openapi import DOCUMENT, render
from toolpipe.shared.agents import all_agents
from toolpipe.shared.dynamo import MAX_CALLER_BYTES
from toolpipe.shared.messages import NOT_BLANK_PATTERN
from toolpipe.shared.runs.report import MAX_TOKEN_CHARS, PAGE_LIMIT, TOKEN_PATTERN


def test_the_checked_in_document_is_the_generated_one(pipeline: Pipeline) -> None:
    assert DOCUMENT.read_text() == render(), "docs/openapi.json is stale: run `make openapi`"


def test_the_document_is_served_and_describes_every_route_and_body(pipeline: Pipeline) -> None:
    from toolpipe.functions.api.handler import with_deployment  # reads the runtime's settings

    status, served = pipeline.runtime.api("GET", "/openapi.json")
    assert status == 200
    # The checked-in document, with what only this deployment knows (its agents, their tools,
    # its time zones, whether runs may name MCP servers).
    assert served == with_deployment(json.loads(DOCUMENT.read_text()))
    start_fields = served["components"]["schemas"]["StartRunRequest"]["properties"]
    assert start_fields["agent"]["anyOf"][0]["enum"] == [agent.name for agent in all_agents()]
    assert (
        "Europe/Paris" in start_fields["timezone"]["enum"]
        and "Mars/Olympus" not in start_fields["timezone"]["enum"]
    )
    operations = {(path, method) for path, ops in served["paths"].items() for method in ops}
    assert operations == {
        ("/runs", "post"),
        ("/runs", "get"),
        ("/runs/{run_id}", "get"),
        ("/runs/{run_id}", "delete"),
        ("/runs/{run_id}/cancel", "post"),
        ("/runs/{run_id}/resume", "post"),
        ("/runs/{run_id}/fork", "post"),
        ("/runs/{run_id}/messages", "get"),
        ("/runs/{run_id}/messages/{seq}", "get"),
        # A run you can see: its timeline (JSON), its page and the runs list (HTML).
        ("/runs/{run_id}/timeline", "get"),
        ("/ui/runs/{run_id}", "get"),
        ("/ui/runs", "get"),
        ("/approvals", "get"),
        ("/approvals/{approval_id}", "get"),
        ("/approvals/{approval_id}/approve", "post"),
        ("/approvals/{approval_id}/deny", "post"),
        ("/approvals/{approval_id}/answer", "post"),
        ("/runs/{run_id}/calls/{call_id}/result", "post"),
        # The approval page behind the signed link (HTML; the signature is the credential).
        ("/approvals/{approval_id}/page", "get"),
        ("/approvals/{approval_id}/page", "head"),
        ("/approvals/{approval_id}/page", "post"),
    }
    start = served["paths"]["/runs"]["post"]
    assert start["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/StartRunRequest"
    }
    schemas = served["components"]["schemas"]
    assert {"input", "metadata", "agent", "tools"} <= set(schemas["StartRunRequest"]["properties"])
    assert start["responses"]["202"]["content"]["application/json"]["schema"]["$ref"].endswith("/RunStarted")
    assert "status_url" in schemas["RunStarted"]["properties"]
    assert "cancelled" in schemas["RunStatus"]["enum"]
    cancel = served["paths"]["/runs/{run_id}/cancel"]["post"]["responses"]
    assert set(cancel) == {"200", "400", "403", "404", "409"}
    delete = served["paths"]["/runs/{run_id}"]["delete"]["responses"]
    assert set(delete) == {"204", "400", "403", "404", "409"} and "content" not in delete["204"]
    assert "retain_until" in schemas["RunView"]["properties"]
    deny = served["paths"]["/approvals/{approval_id}/deny"]["post"]
    assert deny["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/DenyRequest"
    }
    assert set(deny["responses"]) == {"200", "400", "403", "404", "409", "503"}
    assert "task_token" not in json.dumps(schemas["Approval"])
    for path, body in (
        ("/approvals/{approval_id}/answer", "AnswerRequest"),
        ("/runs/{run_id}/calls/{call_id}/result", "ResultRequest"),
    ):
        operation = served["paths"][path]["post"]
        assert operation["requestBody"]["content"]["application/json"]["schema"] == {
            "$ref": f"#/components/schemas/{body}"
        }
        assert set(operation["responses"]) == {"200", "400", "403", "404", "409", "503"}
    approve = served["paths"]["/approvals/{approval_id}/approve"]["post"]["requestBody"]
    assert approve["required"] is False and "arguments" in schemas["ApproveRequest"]["properties"]
    page = served["paths"]["/approvals/{approval_id}/page"]
    assert set(page["post"]["responses"]) == {"200", "400", "403", "409", "410", "503"}
    assert all(op["security"] == [] for op in page.values())
    assert list(page["get"]["responses"]["403"]["content"]) == ["text/html"]


def test_the_document_states_the_rules_the_handler_enforces(pipeline: Pipeline) -> None:
    from toolpipe.functions.api.identity import CALLER_RULE

    document = json.loads(DOCUMENT.read_text())
    schemas = document["components"]["schemas"]

    def parameters(path: str, method: str = "get") -> dict[str, Any]:
        return {p["name"]: p for p in document["paths"][path][method]["parameters"]}

    for path in ("/runs", "/runs/{run_id}/messages"):
        limit = parameters(path)["limit"]["schema"]
        assert (limit["type"], limit["minimum"], limit["maximum"]) == ("integer", 1, PAGE_LIMIT)
    listing = parameters("/runs")
    caller = listing["caller"]["schema"]["anyOf"][0]
    assert caller["maxLength"] == MAX_CALLER_BYTES and CALLER_RULE in listing["caller"]["description"]
    assert CALLER_RULE in document["info"]["description"]
    token = listing["next"]["schema"]["anyOf"][0]
    assert (token["pattern"], token["maxLength"]) == (TOKEN_PATTERN, MAX_TOKEN_CHARS)
    start = schemas["StartRunRequest"]
    assert start["properties"]["input"]["pattern"] == NOT_BLANK_PATTERN
    assert start["properties"]["metadata"]["anyOf"][0]["additionalProperties"] is False
    assert start["properties"]["timezone"]["pattern"]
    assert schemas["ResultRequest"]["oneOf"] == [
        {"required": ["result"], "not": {"required": ["error"]}},
        {"required": ["error"], "not": {"required": ["result"]}, "properties": {"error": {"type": "string"}}},
    ]
