"""The approval links' signing key and the page's routes in the synthesized template (issue 9,
item 4): a generated secret only the signer and the verifier read, the API's URL handed to the
orchestrator without a dependency cycle, the page's methods open to a link holder only."""

from typing import Any

from tests.infra.policies import per_resource
from toolpipe.infra.cdk.functions import API, ORCHESTRATOR, TOOL_WORKER


def _function(template: Any, handler: str) -> tuple[str, dict[str, Any]]:
    [(name, function)] = template.find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": handler}}
    ).items()
    return name, function


def test_the_signing_key_is_generated_and_read_only_by_the_orchestrator_and_the_api(template: Any) -> None:
    secrets = {
        name: s
        for name, s in template.find_resources("AWS::SecretsManager::Secret").items()
        if s["Properties"]["Description"].startswith("HMAC key of toolpipe's signed approval links")
    }
    [(key, secret)] = secrets.items()
    generated = secret["Properties"]["GenerateSecretString"]
    assert generated["PasswordLength"] >= 32 and "SecretString" not in secret["Properties"]
    readers = set()
    for policy in template.find_resources("AWS::IAM::Policy").values():
        for statement in per_resource(policy["Properties"]["PolicyDocument"]["Statement"]):
            if statement["Resource"] == {"Ref": key}:
                assert set(statement["Action"]) == {
                    "secretsmanager:GetSecretValue",
                    "secretsmanager:DescribeSecret",
                }
                readers.update(role["Ref"] for role in policy["Properties"]["Roles"])
    roles = {
        handler: function["Properties"]["Role"]["Fn::GetAtt"][0]
        for handler in (ORCHESTRATOR.handler, API.handler, TOOL_WORKER.handler)
        for _, function in [_function(template, handler)]
    }
    assert readers == {roles[ORCHESTRATOR.handler], roles[API.handler]}
    for handler in (ORCHESTRATOR.handler, API.handler):
        env = _function(template, handler)[1]["Properties"]["Environment"]["Variables"]
        assert env["TOOLPIPE_APPROVAL_SIGNING_KEY_SECRET_ARN"] == {"Ref": key}
    worker_env = _function(template, TOOL_WORKER.handler)[1]["Properties"]["Environment"]["Variables"]
    assert "TOOLPIPE_APPROVAL_SIGNING_KEY_SECRET_ARN" not in worker_env


def test_the_orchestrator_makes_links_under_the_apis_stage_url(template: Any) -> None:
    [(api, _)] = template.find_resources("AWS::ApiGateway::RestApi").items()
    env = _function(template, ORCHESTRATOR.handler)[1]["Properties"]["Environment"]["Variables"]
    url = env["TOOLPIPE_LINK_BASE_URL"]["Fn::Join"][1]
    assert url[0] == "https://" and {"Ref": api} in url and url[-1].endswith("/v1")
    # The id only, never the stage or the deployment: those depend on the functions (a cycle).
    assert "Stage" not in str(url) and "Deployment" not in str(url)


def test_the_page_has_a_throttle_of_its_own(template: Any) -> None:
    [stage] = template.find_resources("AWS::ApiGateway::Stage").values()
    limited = {
        (s["ResourcePath"], s["HttpMethod"]): (s["ThrottlingRateLimit"], s["ThrottlingBurstLimit"])
        for s in stage["Properties"]["MethodSettings"]
        if "ThrottlingRateLimit" in s
    }
    # Its own, beside the stage's (every method: docs/concepts/limits.md "Quotas").
    assert set(limited) == {("/*", "*")} | {
        ("/~1approvals~1{approval_id}~1page", method) for method in ("GET", "HEAD", "POST")
    }
