"""With `api_auth=api_key`, API Gateway reports no IAM user: the API key's id is the caller.

The events below are what API Gateway sends a Lambda proxy integration for a method with
`ApiKeyRequired` and no authorizer: `identity.apiKeyId` and `identity.apiKey` (the key's
secret value) set, every IAM field null.
"""

import json
import uuid
from typing import Any

from tests.conftest import Pipeline
from toolpipe.infra.cdk.functions import API
from toolpipe.infra.local.lambdas import call_function

KEY_A = ("k7ab3x9q2d", "Wq4rS1vN8mTz0pLc6yHj2BdX5eKa9FgU3iOo7sRl")
KEY_B = ("p0c4n8w1ze", "Zx9cV8bN7mA6sD5fG4hJ3kL2qW1eR0tY9uI8oP7a")


def _keyed(method: str, path: str, key: tuple[str, str], body: Any = None) -> dict[str, Any]:
    key_id, key_value = key
    return {
        "resource": path,
        "path": path,
        "httpMethod": method,
        "headers": {"content-type": "application/json", "x-api-key": key_value},
        "multiValueHeaders": {},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": None,
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "stage": "v1",
            "httpMethod": method,
            "identity": {
                "apiKey": key_value,
                "apiKeyId": key_id,
                "userArn": None,
                "user": None,
                "caller": None,
                "accessKey": None,
                "accountId": None,
                "cognitoIdentityId": None,
                "sourceIp": "203.0.113.7",
                "userAgent": "curl/8.5.0",
            },
        },
        "body": None if body is None else json.dumps(body),
        "isBase64Encoded": False,
    }


def _call(event: dict[str, Any]) -> tuple[int, Any]:
    response = call_function(API, event)
    return int(response["statusCode"]), json.loads(response["body"]) if response.get("body") else None


def test_the_api_key_id_owns_the_runs_started_with_it(pipeline: Pipeline) -> None:
    status, started = _call(_keyed("POST", "/runs", KEY_A, {"prompt": "What is 2+3?", "agent": "assistant"}))
    assert status == 202, started
    run_id = started["run_id"]
    pipeline.runtime.wait_for_execution(run_id)

    status, shown = _call(_keyed("GET", f"/runs/{run_id}", KEY_A))
    assert status == 200 and shown["run"]["caller"] == f"api-key:{KEY_A[0]}"
    assert shown["run"]["status"] == "succeeded"
    assert _call(_keyed("GET", f"/runs/{run_id}/messages", KEY_A))[0] == 200
    # Another key is another caller: the run does not exist for it.
    for path in (f"/runs/{run_id}", f"/runs/{run_id}/messages", f"/runs/{run_id}/messages/1"):
        status, answer = _call(_keyed("GET", path, KEY_B))
        assert (status, answer["message"]) == (404, f"run {run_id} not found")


def test_the_key_value_itself_is_stored_nowhere(pipeline: Pipeline) -> None:
    """The id names the caller; the value is a secret and must not reach the history."""
    status, started = _call(_keyed("POST", "/runs", KEY_A, {"prompt": "What is 2+3?", "agent": "assistant"}))
    assert status == 202, started
    pipeline.runtime.wait_for_execution(started["run_id"])
    items = pipeline.runtime.dynamodb.scan(TableName="toolpipe-local")["Items"]
    assert items and KEY_A[0] in json.dumps(items)
    assert KEY_A[1] not in json.dumps(items)
