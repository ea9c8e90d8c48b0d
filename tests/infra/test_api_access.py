"""The API function's access settings and routes in the synthesized template."""

from typing import Any

import pytest

from toolpipe.infra.cdk.app import SKIP_BUNDLING
from toolpipe.infra.cdk.aws_limits import WorstCase
from toolpipe.infra.cdk.functions import API, TRIGGERS

ADMIN = "arn:aws:iam::123456789012:role/Operator"
MCP_SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:docs-mcp"


def _api_environment(template: Any) -> dict[str, Any]:
    functions = template.find_resources("AWS::Lambda::Function")
    api = next(f for f in functions.values() if f["Properties"]["Handler"] == API.handler)
    return dict(api["Properties"]["Environment"]["Variables"])


@pytest.mark.slow
def test_the_admin_principal_and_mcp_secrets_come_from_cdk_context(tmp_path: Any) -> None:
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from toolpipe.infra.cdk.stack import ToolpipeStack

    context = {"admin_principal": ADMIN, "mcp_header_secrets": f"{MCP_SECRET}, {MCP_SECRET}-2"}
    app = App(outdir=str(tmp_path), context=context, post_cli_context=SKIP_BUNDLING)
    template = Template.from_stack(ToolpipeStack(app, "Toolpipe"))
    assert _api_environment(template)["TOOLPIPE_ADMIN_PRINCIPAL"] == ADMIN
    # The MCP header secrets the deployer names: readable by each function that lists or calls MCP tools.
    granted = [
        name
        for name, policy in template.find_resources("AWS::IAM::Policy").items()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "secretsmanager:GetSecretValue" in statement["Action"]
        and statement["Resource"] == [MCP_SECRET, f"{MCP_SECRET}-2"]
    ]
    # The triggers function starts runs as `POST /runs` does, listing MCP tools when asked.
    assert sorted(name[:9] for name in granted) == [
        "ApiServic",
        "Orchestra",
        "ToolRunne",
        "ToolWorke",
        "TriggersF",
    ]
    # And the local runtime, which checks each call against the role's policies, lets it read them.
    from toolpipe.infra.local import iam
    from toolpipe.infra.local.template import Template as LocalTemplate

    resources = template.to_json()["Resources"]
    local = LocalTemplate(resources=resources, outputs={}, path=tmp_path / "template.json")
    triggers = next(
        f["Properties"]["Role"]["Fn::GetAtt"][0]
        for f in resources.values()
        if f["Type"] == "AWS::Lambda::Function" and f["Properties"]["Handler"] == TRIGGERS.handler
    )
    worst = WorstCase({"Resources": resources})
    policy = iam.Policy(
        role_arn="arn:aws:iam::123456789012:role/t",
        documents=tuple(worst.resolve(local.role_policies(triggers))),
    )
    assert policy.allows(iam.Request("secretsmanager:GetSecretValue", f"{MCP_SECRET}-2"))


def test_without_context_no_principal_reads_other_runs(template: Any) -> None:
    assert "TOOLPIPE_ADMIN_PRINCIPAL" not in _api_environment(template)


def test_the_messages_pages_have_a_route(template: Any) -> None:
    resources = template.find_resources("AWS::ApiGateway::Resource")
    assert {r["Properties"]["PathPart"] for r in resources.values()} >= {
        "runs",
        "{run_id}",
        "messages",
        "{seq}",
    }
    messages = next(name for name, r in resources.items() if r["Properties"]["PathPart"] == "messages")
    methods = template.find_resources("AWS::ApiGateway::Method")
    assert any(m["Properties"]["ResourceId"] == {"Ref": messages} for m in methods.values())


def test_runs_are_listed_from_an_index_by_caller_that_the_store_queries(template: Any) -> None:
    from toolpipe.shared.dynamo import CALLER_INDEX, CALLER_INDEX_PK, CALLER_INDEX_PROJECTION, CALLER_INDEX_SK

    [table] = [
        t for k, t in template.find_resources("AWS::DynamoDB::Table").items() if k.startswith("History")
    ]
    [index] = table["Properties"]["GlobalSecondaryIndexes"]
    assert index["IndexName"] == CALLER_INDEX
    assert index["KeySchema"] == [
        {"AttributeName": CALLER_INDEX_PK, "KeyType": "HASH"},
        {"AttributeName": CALLER_INDEX_SK, "KeyType": "RANGE"},
    ]
    # Only what a listing shows: usage and updated_at change every turn and would rewrite it.
    assert index["Projection"] == {
        "ProjectionType": "INCLUDE",
        "NonKeyAttributes": list(CALLER_INDEX_PROJECTION),
    }
    assert "usage" not in CALLER_INDEX_PROJECTION and "updated_at" not in CALLER_INDEX_PROJECTION


def test_the_list_cancel_openapi_and_timeline_routes_exist(template: Any) -> None:
    resources = template.find_resources("AWS::ApiGateway::Resource")
    methods = template.find_resources("AWS::ApiGateway::Method").values()

    def path(ref: Any) -> str:
        # By whole path: a part such as `runs` or `{run_id}` is under more than one parent.
        if not isinstance(ref, dict) or "Ref" not in ref:
            return ""
        resource = resources[ref["Ref"]]["Properties"]
        return f"{path(resource['ParentId'])}/{resource['PathPart']}"

    declared = {(path(m["Properties"]["ResourceId"]), m["Properties"]["HttpMethod"]) for m in methods}
    assert {
        ("/runs", "GET"),
        ("/runs", "POST"),
        ("/runs/{run_id}/cancel", "POST"),
        ("/openapi.json", "GET"),
        ("/runs/{run_id}/timeline", "GET"),
        ("/ui/runs", "GET"),
        ("/ui/runs/{run_id}", "GET"),
    } <= declared


def test_the_api_may_stop_only_its_state_machines_executions(template: Any) -> None:
    policies = template.find_resources("AWS::IAM::Policy")
    api = next(p for name, p in policies.items() if name.startswith("ApiServiceRole"))
    [statement] = [
        s for s in api["Properties"]["PolicyDocument"]["Statement"] if s["Action"] == "states:StopExecution"
    ]
    text = str(statement["Resource"])
    assert ":execution:" in text and "RunFlow" in text and text.rstrip("']}").endswith(":*")


def test_the_local_server_declares_the_methods_the_deployed_api_has(template: Any) -> None:
    # `toolpipe serve` answers 403 to any other method or path, as API Gateway does; with no
    # CORS preflight in the stack (no OPTIONS method), an OPTIONS request is one of those.
    from toolpipe.infra.local.api_proxy import RESOURCES

    resources = template.find_resources("AWS::ApiGateway::Resource")

    def path(ref: Any) -> str:
        if not isinstance(ref, dict) or "Ref" not in ref:
            return ""  # the API's root resource (`Fn::GetAtt` RootResourceId)
        resource = resources[ref["Ref"]]["Properties"]
        return f"{path(resource['ParentId'])}/{resource['PathPart']}"

    declared: dict[str, set[str]] = {}
    for method in template.find_resources("AWS::ApiGateway::Method").values():
        properties = method["Properties"]
        declared.setdefault(path(properties["ResourceId"]), set()).add(properties["HttpMethod"])
    assert declared == {resource: set(methods) for resource, methods in RESOURCES.items()}


def test_api_gateways_own_errors_answer_the_apis_error_body(template: Any) -> None:
    """A method the API has not, a bad signature, the throttle: API Gateway answers these before
    the function, in the `ErrorBody` the document types every error with (issue 35, item 5)."""
    import json

    import jsonschema

    from toolpipe.infra.reference.openapi import DOCUMENT

    error_body = json.loads(DOCUMENT.read_text())["components"]["schemas"]["ErrorBody"]
    responses = {
        r["Properties"]["ResponseType"]: r["Properties"]
        for r in template.find_resources("AWS::ApiGateway::GatewayResponse").values()
    }
    for kind, status in {
        "MISSING_AUTHENTICATION_TOKEN": "403",
        "INVALID_SIGNATURE": "403",
        "ACCESS_DENIED": "403",
        "THROTTLED": "429",
        "REQUEST_TOO_LARGE": "413",
        "BAD_REQUEST_BODY": "400",
    }.items():
        assert responses[kind]["StatusCode"] == status, kind
        # API Gateway puts its message in, quoted as JSON.
        body = responses[kind]["ResponseTemplates"]["application/json"]
        answered = json.loads(body.replace("$context.error.messageString", '"Missing Authentication Token"'))
        jsonschema.validate(answered, error_body)
        assert answered["statusCode"] == int(status)
