"""The OpenAPI document: generated from the handler, served at /openapi.json, checked in."""

import json

from tests.conftest import Pipeline
from toolpipe.infra.openapi import DOCUMENT, render


def test_the_checked_in_document_is_the_generated_one(pipeline: Pipeline) -> None:
    assert DOCUMENT.read_text() == render(), "docs/openapi.json is stale: run `make openapi`"


def test_the_document_is_served_and_describes_every_route_and_body(pipeline: Pipeline) -> None:
    status, served = pipeline.runtime.api("GET", "/openapi.json")
    assert status == 200
    assert served == json.loads(DOCUMENT.read_text())
    operations = {(path, method) for path, ops in served["paths"].items() for method in ops}
    assert operations == {
        ("/runs", "post"),
        ("/runs", "get"),
        ("/runs/{run_id}", "get"),
        ("/runs/{run_id}/cancel", "post"),
        ("/runs/{run_id}/messages", "get"),
        ("/runs/{run_id}/messages/{seq}", "get"),
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
    deny = served["paths"]["/approvals/{approval_id}/deny"]["post"]
    assert deny["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/DenyRequest"
    }
    assert set(deny["responses"]) == {"200", "400", "403", "404", "409"}
    assert "task_token" not in json.dumps(schemas["Approval"])
    for path, body in (
        ("/approvals/{approval_id}/answer", "AnswerRequest"),
        ("/runs/{run_id}/calls/{call_id}/result", "ResultRequest"),
    ):
        operation = served["paths"][path]["post"]
        assert operation["requestBody"]["content"]["application/json"]["schema"] == {
            "$ref": f"#/components/schemas/{body}"
        }
        assert set(operation["responses"]) == {"200", "400", "403", "404", "409"}
    approve = served["paths"]["/approvals/{approval_id}/approve"]["post"]["requestBody"]
    assert approve["required"] is False and "arguments" in schemas["ApproveRequest"]["properties"]
    page = served["paths"]["/approvals/{approval_id}/page"]
    assert set(page["post"]["responses"]) == {"200", "400", "403", "409", "410"}
    assert all(op["security"] == [] for op in page.values())
    assert list(page["get"]["responses"]["403"]["content"]) == ["text/html"]
