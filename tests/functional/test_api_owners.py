"""A run is owned by a stable identity: a role's sessions are the role (shared/owners.py).

The events below are what API Gateway sends a Lambda proxy integration for a method with
`AWS_IAM` authorization: the signer in `identity.userArn` (for a role, the session's STS ARN,
which names the role but not its path), its principal id in `caller` and `user` (the role's id
and the session name), the account, the access key; no API key.
"""

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import CALLS, Pipeline, _pipeline, call
from tests.e2e.test_approvals import GATED
from toolpipe.infra.cdk.functions import API
from toolpipe.infra.local.lambdas import call_function
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.shared.agents import AGENTS

ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/Reports"  # its owner: no path, as its sessions name it


def session(name: str, role: str = "Reports") -> str:
    return f"arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{name}"


def _signed(
    method: str, path: str, user_arn: str, body: Any = None, query: dict[str, str] | None = None
) -> dict[str, Any]:
    principal = "AROA3XFRBF535PLBIFPI4" if ":assumed-role/" in user_arn else "AIDA3XFRBF535PLBIFPI4"
    user = f"{principal}:{user_arn.rsplit('/', 1)[-1]}" if ":assumed-role/" in user_arn else principal
    return {
        "resource": path,
        "path": path,
        "httpMethod": method,
        "headers": {"content-type": "application/json"},
        "multiValueHeaders": {},
        "queryStringParameters": query,
        "multiValueQueryStringParameters": None if query is None else {k: [v] for k, v in query.items()},
        "pathParameters": None,
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "stage": "v1",
            "httpMethod": method,
            "resourcePath": path,
            "domainName": "a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com",
            "identity": {
                "cognitoIdentityPoolId": None,
                "accountId": ACCOUNT,
                "cognitoIdentityId": None,
                "caller": user,
                "sourceIp": "203.0.113.7",
                "principalOrgId": None,
                "accessKey": "ASIA3XFRBF53EXAMPLE",
                "cognitoAuthenticationType": None,
                "cognitoAuthenticationProvider": None,
                "userArn": user_arn,
                "userAgent": "Boto3/1.44.5",
                "user": user,
                "apiKey": None,
                "apiKeyId": None,
            },
        },
        "body": None if body is None else json.dumps(body),
        "isBase64Encoded": False,
    }


def _call(event: dict[str, Any]) -> tuple[int, Any]:
    response = call_function(API, event)
    return int(response["statusCode"]), json.loads(response["body"]) if response.get("body") else None


def _start(pipeline: Pipeline, user_arn: str, **fields: Any) -> str:
    status, started = _call(
        _signed("POST", "/runs", user_arn, {"input": "What is 2+3?", "agent": "assistant", **fields})
    )
    assert status == 202, started
    pipeline.runtime.wait_for_execution(started["run_id"])
    return str(started["run_id"])


def test_two_sessions_of_one_role_own_the_same_runs(pipeline: Pipeline) -> None:
    run_id = _start(pipeline, session("ecs-task-1f2e"))
    # The next task of the same service: another session name, the same role.
    status, shown = _call(_signed("GET", f"/runs/{run_id}", session("ecs-task-9a8b")))
    assert status == 200 and shown["run"]["caller"] == ROLE
    status, listed = _call(_signed("GET", "/runs", session("ecs-task-9a8b")))
    assert status == 200 and [r["run_id"] for r in listed["runs"]] == [run_id]
    # Another role's session, however its session is named, does not see it.
    status, answer = _call(_signed("GET", f"/runs/{run_id}", session("ecs-task-1f2e", role="Billing")))
    assert (status, answer["message"]) == (404, f"run {run_id} not found")
    assert _call(_signed("GET", "/runs", session("ecs-task-1f2e", role="Billing")))[1]["runs"] == []


def test_an_iam_users_arn_is_its_own_owner(pipeline: Pipeline) -> None:
    user = f"arn:aws:iam::{ACCOUNT}:user/division/bob"
    run_id = _start(pipeline, user)
    status, shown = _call(_signed("GET", f"/runs/{run_id}", user))
    assert status == 200 and shown["run"]["caller"] == user


@pytest.mark.parametrize(
    "odd",
    [
        f"arn:aws:sts::{ACCOUNT}:assumed-role/Reports",  # no session
        f"arn:aws:sts::{ACCOUNT}:assumed-role//ecs-task-1f2e",  # no role
        f"arn:aws:sts::{ACCOUNT}:assumed-role/Reports/x/y",  # more parts than a session has
        "arn:aws:sts::1234:assumed-role/Reports/ecs-task-1f2e",  # not an account
        f"arn:aws:sts::{ACCOUNT}:federated-user/ana",
        "not an arn at all",
    ],
)
def test_an_identity_that_is_not_a_roles_session_is_kept_as_it_is(pipeline: Pipeline, odd: str) -> None:
    run_id = _start(pipeline, odd)
    status, shown = _call(_signed("GET", f"/runs/{run_id}", odd))
    assert status == 200 and shown["run"]["caller"] == odd


ADMIN_ROLE = f"arn:aws:iam::{ACCOUNT}:role/platform/Operator"  # as `-c admin_principal=` names it


@pytest.fixture
def with_admin_role() -> Iterator[Pipeline]:
    yield from _pipeline({"TOOLPIPE_ADMIN_PRINCIPAL": ADMIN_ROLE})


def test_a_role_arn_as_admin_principal_is_every_session_of_that_role(with_admin_role: Pipeline) -> None:
    run_id = _start(with_admin_role, session("ecs-task-1f2e"))
    operator = session("jane@example.com", role="Operator")  # its path is not in a session ARN
    assert _call(_signed("GET", f"/runs/{run_id}", operator))[0] == 200
    status, listed = _call(_signed("GET", "/runs", operator, query={"caller": "*"}))
    assert status == 200 and run_id in [r["run_id"] for r in listed["runs"]]
    status, listed = _call(_signed("GET", "/runs", operator, query={"caller": ROLE}))
    assert status == 200 and [r["run_id"] for r in listed["runs"]] == [run_id]
    # A role of the same name in another account is another principal.
    stranger = "arn:aws:sts::210987654321:assumed-role/Operator/jane@example.com"
    assert _call(_signed("GET", f"/runs/{run_id}", stranger))[0] == 404
    assert _call(_signed("GET", "/runs", stranger, query={"caller": "*"}))[0] == 403


def test_a_decision_records_the_session_that_made_it(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(AGENTS, GATED.name, GATED)
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=250)]), Reply(content="Sent."))
    status, started = _call(
        _signed("POST", "/runs", session("ecs-task-1f2e"), {"input": "pay ana", "agent": "gated"})
    )
    assert status == 202, started
    pipeline.callers[started["run_id"]] = ROLE
    deadline = time.monotonic() + 20
    while not (listed := _call(_signed("GET", "/approvals", session("jane")))[1]["approvals"]):
        assert time.monotonic() < deadline, "no call waits for approval"
        time.sleep(0.05)
    [approval] = listed
    assert approval["requester"] == ROLE
    # Another session of the role decides: allowed (the owner), and recorded as that session.
    status, _ = _call(_signed("POST", f"/approvals/{approval['approval_id']}/approve", session("jane")))
    assert status == 200
    pipeline.finish(started["run_id"])
    assert CALLS.counts == {"wire_money": 1}
    record = _call(_signed("GET", f"/approvals/{approval['approval_id']}", session("ecs-task-1f2e")))[1]
    assert record["decided_by"] == session("jane")
