"""The OpenAPI document: generated from the handler, served at /openapi.json, checked in."""

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import Pipeline, Reply, call
from tests.openapi_check import checker, request_conforms, response_conforms
from toolpipe.infra.reference.openapi import DOCUMENT, render
from toolpipe.shared.agents import all_agents
from toolpipe.shared.dynamo import MAX_CALLER_BYTES
from toolpipe.shared.messages import NOT_BLANK_PATTERN
from toolpipe.shared.runs.report import MAX_TOKEN_CHARS, PAGE_LIMIT, TOKEN_PATTERN

# package.json's Redocly CLI, on the Node beside it (`make install`).
REDOCLY = Path(__file__).resolve().parents[2] / "node_modules" / ".bin" / "redocly"


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
    # A pattern, not the runtime's list of zones (issue 35: names such as GMT+0, GMT-0 and GMT0
    # collapse into one key of a generated enum).
    assert "enum" not in start_fields["timezone"] and start_fields["timezone"]["pattern"]
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
    assert set(cancel) == {"200", "400", "403", "404", "409", "429", "500"}
    delete = served["paths"]["/runs/{run_id}"]["delete"]["responses"]
    assert set(delete) == {"204", "400", "403", "404", "409", "429", "500"} and "content" not in delete["204"]
    assert "retain_until" in schemas["RunView"]["properties"]
    deny = served["paths"]["/approvals/{approval_id}/deny"]["post"]
    assert deny["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/DenyRequest"
    }
    assert set(deny["responses"]) == {"200", "400", "403", "404", "409", "429", "500", "503"}
    assert "task_token" not in json.dumps(schemas["ApprovalView"])
    for path, body in (
        ("/approvals/{approval_id}/answer", "AnswerRequest"),
        ("/runs/{run_id}/calls/{call_id}/result", "ResultRequest"),
    ):
        operation = served["paths"][path]["post"]
        assert operation["requestBody"]["content"]["application/json"]["schema"] == {
            "$ref": f"#/components/schemas/{body}"
        }
        assert set(operation["responses"]) == {"200", "400", "403", "404", "409", "429", "500", "503"}
    approve = served["paths"]["/approvals/{approval_id}/approve"]["post"]["requestBody"]
    assert approve["required"] is False and "arguments" in schemas["ApproveRequest"]["properties"]
    page = served["paths"]["/approvals/{approval_id}/page"]
    assert set(page["post"]["responses"]) == {"200", "400", "403", "409", "410", "429", "500", "503"}
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
        {"required": ["result"], "not": {"required": ["error"], "properties": {"error": {}}}},
        {
            "required": ["error"],
            "not": {"required": ["result"], "properties": {"result": {}}},
            "properties": {"error": {"type": "string"}},
        },
    ]


def _served(pipeline: Pipeline) -> dict[str, Any]:
    status, served = pipeline.runtime.api("GET", "/openapi.json")
    assert status == 200
    return dict(served)


def test_the_served_document_admits_the_starts_the_server_takes(pipeline: Pipeline) -> None:
    """Issue 35, item 1: what a deployment adds is what it knows, and never refuses a request the
    server takes: a tool one agent has (the example's `triage` has none), any zone it knows."""
    served = _served(pipeline)
    committed = json.loads(DOCUMENT.read_text())
    # Only StartRunRequest and the local caller's scheme differ from the committed document.
    differs = {
        name
        for name, schema in served["components"]["schemas"].items()
        if committed["components"]["schemas"].get(name) != schema
    }
    assert differs == {"StartRunRequest"}
    assert set(served["components"]["securitySchemes"]) - set(committed["components"]["securitySchemes"]) == {
        "localCaller"
    }
    spec = checker(served)
    for request in (
        # Named: which agent is the default depends on which one registered first.
        {"input": "What is the square root of 16?", "agent": "assistant", "tools": ["square_root"]},
        {"input": "What time is it?", "agent": "assistant", "timezone": "Etc/GMT+1"},
        {"input": "What time is it?", "agent": "assistant", "timezone": "GMT0"},
    ):
        request_conforms(spec, "POST", "/runs", request)
        status, started = pipeline.runtime.api("POST", "/runs", request)
        assert status == 202, started
        response_conforms(spec, "POST", "/runs", status, started, request)
    # A generated enum of zones had one key for GMT+0, GMT-0 and GMT0: no enum of the served
    # document has two values that differ only in punctuation or case.
    enums = [s["enum"] for s in _schemas_within(served) if "enum" in s]
    for values in enums:
        keys = [re.sub(r"[^A-Za-z0-9]", "", str(v)).lower() for v in values]
        assert len(set(keys)) == len(keys), values


def _schemas_within(value: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        found.append(value)
        for inner in value.values():
            found += _schemas_within(inner)
    elif isinstance(value, list):
        for inner in value:
            found += _schemas_within(inner)
    return found


def test_every_operation_says_how_to_authenticate(pipeline: Pipeline) -> None:
    """Issue 35, item 2: the schemes the stack deploys (SigV4, or an API key) on every operation
    but the signed approval page; the local server's caller header in the document it serves."""
    committed = json.loads(DOCUMENT.read_text())
    served = _served(pipeline)
    either = [{"sigv4": []}, {"apiKey": []}]
    for document, security in ((committed, either), (served, [*either, {"localCaller": []}])):
        assert set(document["components"]["securitySchemes"]) == {next(iter(s)) for s in security}
        for path, operations in document["paths"].items():
            for method, operation in operations.items():
                assert operation["security"] == ([] if path.endswith("/page") else security), (method, path)
    sigv4 = committed["components"]["securitySchemes"]["sigv4"]
    assert (sigv4["in"], sigv4["name"], sigv4["x-amazon-apigateway-authtype"]) == (
        "header",
        "Authorization",
        "awsSigv4",
    )
    assert committed["components"]["securitySchemes"]["apiKey"]["name"] == "x-api-key"
    local = served["components"]["securitySchemes"]["localCaller"]
    assert (local["type"], local["in"], local["name"]) == ("apiKey", "header", "X-Toolpipe-Caller")


OPERATION_IDS = {
    ("post", "/runs"): "startRun",
    ("get", "/runs"): "listRuns",
    ("get", "/runs/{run_id}"): "getRun",
    ("delete", "/runs/{run_id}"): "deleteRun",
    ("post", "/runs/{run_id}/cancel"): "cancelRun",
    ("get", "/runs/{run_id}/messages"): "listMessages",
    ("get", "/runs/{run_id}/messages/{seq}"): "getMessage",
    ("get", "/approvals"): "listApprovals",
    ("get", "/approvals/{approval_id}"): "getApproval",
    ("post", "/approvals/{approval_id}/approve"): "approveApproval",
    ("post", "/approvals/{approval_id}/deny"): "denyApproval",
    ("post", "/approvals/{approval_id}/answer"): "answerApproval",
    ("post", "/runs/{run_id}/calls/{call_id}/result"): "postCallResult",
}


def test_operations_have_names_tags_and_typed_errors() -> None:
    """Issue 35, item 5: operation ids a person would write, a tag per resource, and an
    `ErrorBody` for every error status an operation answers in JSON."""
    document = json.loads(DOCUMENT.read_text())
    tags = {tag["name"] for tag in document["tags"]}
    ids = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            ids.append(operation["operationId"])
            assert re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)*", operation["operationId"]), operation["operationId"]
            assert len(operation["tags"]) == 1 and operation["tags"][0] in tags, (method, path)
            assert {"403", "429", "500"} <= set(operation["responses"]), (method, path)
            for status, response in operation["responses"].items():
                json_body = response.get("content", {}).get("application/json")
                if int(status) >= 400 and json_body is not None:
                    assert json_body["schema"] == {"$ref": "#/components/schemas/ErrorBody"}, (
                        method,
                        path,
                        status,
                    )
    assert len(set(ids)) == len(ids)
    assert {key: document["paths"][key[1]][key[0]]["operationId"] for key in OPERATION_IDS} == OPERATION_IDS
    assert {tags_of["tags"][0] for tags_of in document["paths"]["/runs/{run_id}/messages"].values()} == {
        "messages"
    }


def test_the_document_passes_redoclys_recommended_rules(pipeline: Pipeline, tmp_path: Path) -> None:
    """Issue 35, item 6: an independent linter (Redocly CLI, package.json) on both documents,
    its recommended rules as they are: no error and no warning but the license toolpipe has not
    named."""
    served = tmp_path / "served.json"
    served.write_text(json.dumps(_served(pipeline)))
    for document in (DOCUMENT, served):
        result = subprocess.run(
            [str(REDOCLY), "lint", str(document), "--extends=recommended", "--format=json"],
            capture_output=True,
            text=True,
            timeout=60,
            env={
                **os.environ,
                "PATH": f"{REDOCLY.parent}:{os.environ['PATH']}",
                "REDOCLY_TELEMETRY": "off",
                "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true",
            },
        )
        report = json.loads(result.stdout)
        problems = [(p["ruleId"], p["location"][0]["pointer"]) for p in report["problems"]]
        assert problems == [("info-license", "#/info")], (document, problems)


def test_a_runs_history_is_typed_and_its_real_answers_conform(pipeline: Pipeline) -> None:
    """Issue 35, item 3: history items a union on `kind`, timestamps `date-time`, one type a
    concept (slots integers, arguments objects); a run's real answers validate against it."""
    document = json.loads(DOCUMENT.read_text())
    schemas = document["components"]["schemas"]
    views = {
        "user": "#/components/schemas/UserMessageView",
        "assistant": "#/components/schemas/AssistantMessageView",
        "tool_result": "#/components/schemas/ToolResultView",
    }
    items = schemas["MessagesPage"]["properties"]["messages"]["items"]
    assert items["discriminator"] == {"propertyName": "kind", "mapping": views}
    one = document["paths"]["/runs/{run_id}/messages/{seq}"]["get"]["responses"]["200"]
    entry = one["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert schemas[entry]["discriminator"] == items["discriminator"]
    for kind, ref in views.items():
        view = schemas[ref.rsplit("/", 1)[-1]]
        assert "kind" in view["required"] and view["properties"]["kind"]["const"] == kind
    stamps = [
        (name, field)
        for schema in schemas.values()
        for name, field in schema.get("properties", {}).items()
        if name.endswith("_at")
    ]
    assert len(stamps) > 10
    for name, field in stamps:
        assert any(s.get("format") == "date-time" for s in field.get("anyOf", [field])), name
    for path, operations in document["paths"].items():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter["name"] in {"seq", "call_id", "after", "executions_after", "limit"}:
                    assert parameter["schema"]["type"] == "integer", (path, parameter["name"])
    edited = schemas["ApprovalView"]["properties"]["arguments"]["anyOf"]
    assert (
        edited[0]["type"]
        == "object"
        == schemas["ApproveRequest"]["properties"]["arguments"]["anyOf"][0]["type"]
    )
    assert [s["type"] for s in schemas["ToolExecution"]["properties"]["arguments"]["anyOf"]] == [
        "object",
        "string",
    ]

    # A run with a call, a long result (a preview) and an answer, read as a client reads it.
    pipeline.script(
        Reply(tool_calls=[call("big_output", kilobytes=2), call("count_once", label="x" * 1500)]),
        Reply(content="done"),
    )
    run_id = pipeline.start("go")
    pipeline.finish(run_id)
    spec = checker(_served(pipeline))
    targets = [f"/runs/{run_id}", f"/runs/{run_id}/messages?limit=2", f"/runs/{run_id}/messages?after=2"]
    status, page = pipeline.runtime.api("GET", f"/runs/{run_id}/messages")
    assert {m["kind"] for m in page["messages"]} == {"user", "assistant", "tool_result"}
    assert any("truncated" in m for m in page["messages"])  # previews conform too
    targets += [f"/runs/{run_id}/messages/{m['seq']}" for m in page["messages"]]
    for target in targets:
        status, body = pipeline.runtime.api("GET", target)
        assert status == 200, body
        response_conforms(spec, "GET", target, status, body)
    status, shown = pipeline.runtime.api("GET", f"/runs/{run_id}")
    assert shown["executions"][0]["arguments"] == {"kilobytes": 2}
