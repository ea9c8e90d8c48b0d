"""Each AWS call a local function makes is authorized against its own role, as on AWS.

moto's IAM access control authorizes actions only: for most services it checks a request
against the resource `*`, so a policy that names its table or queue (all of ours) would allow
nothing, and it needs every request signed with an assumed role's keys. Here the caller is the
function whose invocation is running (`infra/local/isolation.py`), the action, the resources and
the condition keys come from the operation and its parameters, as IAM's service authorization
reference names them, moto's `IAMPolicyStatement` matches the action and resource against each
statement of the role's policies from the synthesized template, and `conditions.py` evaluates
its `Condition` block. A call no statement allows, or one denies, fails before it is sent with
the error and HTTP status that service answers (`_DENIED`). A call allowed is then held to the
request limits AWS enforces and moto does not (`service_limits.py`). A read of a missing S3 key
fails as AWS fails it for the caller: 403, not 404, to a role that may not list the bucket
(`s3_absence.py`).

`PutEvents` is authorized entry by entry, as EventBridge does (each entry names its own bus,
source and detail-type, the keys `events:source` and `events:detail-type`): a refused entry
fails in the answer's `Entries` (`AccessDeniedException`; AWS may name it
`NotAuthorizedForSourceException` or `NotAuthorizedForDetailTypeException`) and the others are
put. Requests carry only those condition keys: a statement that needs another (a customer-managed
key's `kms:ViaService`, which the local runtime never uses) allows nothing here.

Calls made outside any function (the CLI, the runtime setting itself up, moto's own services
among themselves) are the developer's and are not checked.
"""

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from botocore.client import BaseClient
from botocore.exceptions import ClientError
from moto.iam.access_control import IAMPolicyStatement, PermissionResult

from toolpipe.infra.local import conditions, s3_absence, service_limits, stopped_calls
from toolpipe.infra.local.caller import current
from toolpipe.infra.local.process_patch import Patched

REGION = "us-east-1"
ACCOUNT = "123456789012"


@dataclass(frozen=True)
class Request:
    """What IAM authorizes for one call, or one entry of it: an action on a resource, with the
    condition keys the request carries (each with its values)."""

    action: str
    resource: str
    context: dict[str, tuple[str, ...]] = field(default_factory=dict)


# How many (action, resource) answers a statement keeps: a run's own resources (its objects)
# are new each run, and a server runs for days.
KEPT_MATCHES = 4096


@dataclass(frozen=True)
class _Statement:
    # moto matches the effect, the action and the resource; the condition is evaluated apart.
    scope: IAMPolicyStatement
    condition: dict[str, Any]
    deny: bool
    # moto's answers by (action, resource): its match is a function of those and the statement,
    # ~40 µs of wildcard patterns each, and a tool turn makes ~20 calls.
    _matches: dict[tuple[str, str], PermissionResult] = field(default_factory=dict, compare=False)

    def matches(self, action: str, resource: str) -> PermissionResult:
        key = (action, resource)
        found = self._matches.get(key)
        if found is None:
            if len(self._matches) >= KEPT_MATCHES:
                self._matches.clear()
            found = self._matches[key] = self.scope.is_action_permitted(action, resource)
        return found


@dataclass(frozen=True)
class Policy:
    """A role's policies, resolved: who it is and what its statements allow."""

    role_arn: str
    documents: tuple[dict[str, Any], ...]
    # The state machine whose tasks `SendTask*` answers (a token names no ARN of its own).
    state_machine_arn: str = ""
    # The runtime's secrets' ARNs by name: a call may name a secret either way.
    secret_arns: Mapping[str, str] = field(default_factory=dict)

    @functools.cached_property
    def _statements(self) -> tuple[_Statement, ...]:
        # Parsed once: a tool turn makes ~14 calls.
        found = []
        for document in self.documents:
            listed = document["Statement"]
            for statement in listed if isinstance(listed, list) else [listed]:
                unconditioned = {k: v for k, v in statement.items() if k != "Condition"}
                found.append(
                    _Statement(
                        IAMPolicyStatement(unconditioned),
                        statement.get("Condition") or {},
                        statement["Effect"] == "Deny",
                    )
                )
        return tuple(found)

    def allows(self, request: Request) -> bool:
        if request.action == "sts:GetCallerIdentity":  # AWS allows it whatever the policies say
            return True
        allowed = False
        for statement in self._statements:
            if statement.matches(request.action, request.resource) == PermissionResult.NEUTRAL:
                continue
            try:
                holds = conditions.hold(statement.condition, request.context)
            except conditions.UnsupportedConditionError:
                holds = statement.deny  # unknown: an Allow does not apply, a Deny does
            if holds and statement.deny:
                return False
            allowed = allowed or holds
        return allowed


class AccessDeniedError(ClientError):
    """What AWS answers a call the caller's policies do not allow."""


def _refusal(policy: Policy, request: Request) -> str:
    return (
        f"User: {policy.role_arn} is not authorized to perform: {request.action} on resource: "
        f"{request.resource} because no identity-based policy allows the {request.action} action"
    )


# What each service answers a call IAM refuses, code and HTTP status, where it is not
# AccessDeniedException with 400 (DynamoDB, Step Functions, EventBridge, Secrets Manager, KMS,
# CloudWatch Logs): the XML (query) services and SQS (whose JSON protocol keeps its query codes)
# say AccessDenied, SNS AuthorizationError, and Lambda's REST API answers 403.
_DENIED: dict[str, tuple[str, int]] = {
    "s3": ("AccessDenied", 403),
    "sqs": ("AccessDenied", 403),
    "ses": ("AccessDenied", 403),
    "sts": ("AccessDenied", 403),
    "iam": ("AccessDenied", 403),
    "sns": ("AuthorizationError", 403),
    "lambda": ("AccessDeniedException", 403),
}


def _deny(policy: Policy, request: Request, operation: str, service: str) -> AccessDeniedError:
    code, status = _DENIED.get(service, ("AccessDeniedException", 400))
    # Typed loosely: botocore's TypedDict wants the metadata a real response carries.
    response: Any = {
        "Error": {"Code": code, "Message": _refusal(policy, request)},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return AccessDeniedError(response, operation)


def _arn(service: str, resource: str) -> str:
    return f"arn:aws:{service}:{REGION}:{ACCOUNT}:{resource}"


def queue_arn(url: str) -> str:
    """A queue's ARN from its URL, as `Fn::GetAtt [queue, Arn]` gives it: no request to moto.
    https://sqs.REGION.amazonaws.com/ACCOUNT/NAME: the account is the URL's, not assumed ours
    (moto's may be another: MOTO_ACCOUNT_ID)."""
    parts = urlsplit(url).path.strip("/").split("/")
    account, name = (parts[-2], parts[-1]) if len(parts) >= 2 else (ACCOUNT, parts[-1])
    return f"arn:aws:sqs:{REGION}:{account}:{name}"


def _table(name: str, index: str | None = None) -> str:
    if name.startswith("arn:"):
        return name
    return _arn("dynamodb", f"table/{name}" + (f"/index/{index}" if index else ""))


# S3 operations whose IAM action has another name (IAM's service authorization reference).
_S3_ACTIONS = {
    "HeadObject": "GetObject",
    "ListObjectsV2": "ListBucket",
    "ListObjects": "ListBucket",
    "HeadBucket": "ListBucket",
    "ListObjectVersions": "ListBucketVersions",
    "DeleteObjects": "DeleteObject",
    "CreateMultipartUpload": "PutObject",
    "UploadPart": "PutObject",
    "CompleteMultipartUpload": "PutObject",
    "AbortMultipartUpload": "AbortMultipartUpload",
    "GetBucketNotificationConfiguration": "GetBucketNotification",
    "PutBucketNotificationConfiguration": "PutBucketNotification",
}
# A read of a version (`VersionId`) is another action.
_S3_VERSION_ACTIONS = {"GetObject": "GetObjectVersion", "HeadObject": "GetObjectVersion"}
_DYNAMODB_ITEM_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


def requests(service: str, operation: str, params: dict[str, Any], policy: Policy) -> list[Request]:
    """What IAM authorizes for one call: each action on each resource it names; for `PutEvents`,
    each entry, with its source and detail-type."""
    if service == "events" and operation == "PutEvents":
        return [_put_event(entry) for entry in params.get("Entries", [])]
    context: dict[str, tuple[str, ...]] = {}
    # A listing's `s3:prefix`; one that names none lacks the key.
    if (
        service == "s3"
        and operation in ("ListObjectsV2", "ListObjects", "ListObjectVersions")
        and "Prefix" in params
    ):
        context["s3:prefix"] = (str(params["Prefix"]),)
    return [
        Request(action, resource, context)
        for action, resource in _resources(service, operation, params, policy)
    ]


def _put_event(entry: dict[str, Any]) -> Request:
    bus = entry.get("EventBusName") or "default"
    keys = {"events:source": entry.get("Source"), "events:detail-type": entry.get("DetailType")}
    return Request(
        "events:PutEvents",
        bus if bus.startswith("arn:") else _arn("events", f"event-bus/{bus}"),
        # An entry without one lacks the key (EventBridge refuses the entry anyway).
        {key: (value,) for key, value in keys.items() if isinstance(value, str)},
    )


Pairs = list[tuple[str, str]]


def _resources(service: str, operation: str, params: dict[str, Any], policy: Policy) -> Pairs:
    """Each action the call is authorized for, with the resource it acts on."""
    action = f"{service}:{operation}"
    by_service = _RESOURCES_BY_SERVICE.get(service)
    if by_service is None:
        return [(action, "*")]
    return by_service(action, operation, params, policy)


def _dynamodb(action: str, operation: str, params: dict[str, Any], policy: Policy) -> Pairs:
    if operation in ("TransactWriteItems", "TransactGetItems"):
        return [
            (f"dynamodb:{_DYNAMODB_ITEM_ACTIONS[kind]}", _table(body["TableName"]))
            for item in params.get("TransactItems", [])
            for kind, body in item.items()
        ]
    if operation in ("BatchGetItem", "BatchWriteItem"):
        return [(action, _table(name)) for name in params.get("RequestItems", {})]
    if "TableName" in params:
        return [(action, _table(params["TableName"], params.get("IndexName")))]
    return [(action, "*")]


def _sqs(action: str, operation: str, params: dict[str, Any], policy: Policy) -> Pairs:
    if "QueueUrl" in params:
        return [(action, queue_arn(params["QueueUrl"]))]
    if "QueueName" in params:
        return [(action, _arn("sqs", params["QueueName"]))]
    return [(action, "*")]


def _s3(action: str, operation: str, params: dict[str, Any], policy: Policy) -> Pairs:
    if "VersionId" in params and operation in _S3_VERSION_ACTIONS:
        action = f"s3:{_S3_VERSION_ACTIONS[operation]}"
    else:
        action = f"s3:{_S3_ACTIONS.get(operation, operation)}"
    bucket = params.get("Bucket")
    if bucket is None:
        return [(action, "*")]
    if operation in ("CopyObject", "UploadPartCopy"):
        source = params["CopySource"]
        source = source if isinstance(source, str) else f"{source['Bucket']}/{source['Key']}"
        return [
            ("s3:PutObject", f"arn:aws:s3:::{bucket}/{params['Key']}"),
            ("s3:GetObject", f"arn:aws:s3:::{source.lstrip('/')}"),
        ]
    if "Key" in params:
        return [(action, f"arn:aws:s3:::{bucket}/{params['Key']}")]
    if operation == "DeleteObjects":
        return [
            (action, f"arn:aws:s3:::{bucket}/{o['Key']}") for o in params.get("Delete", {}).get("Objects", [])
        ]
    return [(action, f"arn:aws:s3:::{bucket}")]


def _states(action: str, operation: str, params: dict[str, Any], policy: Policy) -> Pairs:
    for name in ("stateMachineArn", "executionArn"):
        if name in params:
            return [(action, params[name])]
    if "taskToken" in params:
        return [(action, policy.state_machine_arn)]
    return [(action, "*")]


def _secretsmanager(action: str, operation: str, params: dict[str, Any], policy: Policy) -> Pairs:
    secret = params.get("SecretId")
    if secret is None:
        return [(action, "*")]
    if secret.startswith("arn:"):
        return [(action, secret)]
    return [(action, policy.secret_arns.get(secret, _arn("secretsmanager", f"secret:{secret}")))]


def _ses(action: str, operation: str, params: dict[str, Any], policy: Policy) -> Pairs:
    if operation not in ("SendEmail", "SendRawEmail"):
        return [(action, "*")]
    # SES v1 names the sender `Source`, v2 `FromEmailAddress`; both authorize its identity.
    source = str(params.get("Source") or params.get("FromEmailAddress") or "")
    identity = source.rsplit("<", 1)[-1].rstrip(">").strip()
    return [(action, _arn("ses", f"identity/{identity}"))]


def _lambda(action: str, operation: str, params: dict[str, Any], policy: Policy) -> Pairs:
    if "FunctionName" not in params:
        return [(action, "*")]
    name = params["FunctionName"]
    return [
        (
            "lambda:InvokeFunction" if operation == "Invoke" else action,
            name if name.startswith("arn:") else _arn("lambda", f"function:{name}"),
        )
    ]


_RESOURCES_BY_SERVICE: dict[str, Callable[[str, str, dict[str, Any], Policy], Pairs]] = {
    "dynamodb": _dynamodb,
    "sqs": _sqs,
    "s3": _s3,
    "states": _states,
    "secretsmanager": _secretsmanager,
    "ses": _ses,
    "lambda": _lambda,
}


# A secret's ARN by its name: calls may name a secret either way.
def authorize(policy: Policy, service: str, operation: str, params: dict[str, Any]) -> None:
    """Raise AccessDeniedError unless `policy` allows every action and resource of the call."""
    for request in requests(service, operation, params, policy):
        if not policy.allows(request):
            raise _deny(policy, request, operation, service)


def _signing_service(model: Any) -> str:
    metadata = model.metadata
    return str(metadata.get("signingName") or metadata["endpointPrefix"])


_make_api_call = BaseClient._make_api_call  # type: ignore[attr-defined]


def _make_api_call_as_caller(self: BaseClient, operation_name: str, api_params: dict[str, Any]) -> Any:
    context = current()
    if context is not None:
        if context.stopped:
            # A thread its runtime left running (a tool that hung past shutdown), calling while
            # another runtime is up: this replaces the guard that refuses it when none is
            # (stopped_calls.py) for as long as the runtime is up.
            raise stopped_calls.stopped_error(context, operation_name)
        service = _signing_service(self.meta.service_model)
        put_events = (service, operation_name) == ("events", "PutEvents")
        if not put_events:
            authorize(context.policy, service, operation_name, api_params)
        # What AWS refuses although IAM allows it (too large, or out of a new account's bounds).
        service_limits.check(service, operation_name, api_params)
        if put_events:
            return _put_events(self, context.policy, api_params)
        if service == "s3" and operation_name in s3_absence.READS:
            return _s3_read(self, context.policy, operation_name, api_params)
    return _make_api_call(self, operation_name, api_params)


def _s3_read(client: BaseClient, policy: Policy, operation: str, params: dict[str, Any]) -> Any:
    """An S3 read whose missing key is answered as AWS answers the caller (`s3_absence.py`)."""
    try:
        return _make_api_call(client, operation, params)
    except ClientError as e:
        listing = Request("s3:ListBucket", f"arn:aws:s3:::{params.get('Bucket')}")
        hidden = s3_absence.hidden(operation, e, policy.allows(listing))
        if hidden is None:
            raise
        raise hidden from None


def _put_events(client: BaseClient, policy: Policy, params: dict[str, Any]) -> Any:
    """`PutEvents` as EventBridge authorizes it: entry by entry. The refused entries fail in the
    answer, in their place; the others are sent."""
    entries = params.get("Entries", [])
    refused = {
        index: _refusal(policy, request)
        for index, request in enumerate(requests("events", "PutEvents", params, policy))
        if not policy.allows(request)
    }
    if not refused:
        return _make_api_call(client, "PutEvents", params)
    kept = [entry for index, entry in enumerate(entries) if index not in refused]
    answer: dict[str, Any] = (
        _make_api_call(client, "PutEvents", {**params, "Entries": kept})
        if kept
        else {"FailedEntryCount": 0, "Entries": [], "ResponseMetadata": {"HTTPStatusCode": 200}}
    )
    sent = iter(answer["Entries"])
    return {
        **answer,
        "FailedEntryCount": answer["FailedEntryCount"] + len(refused),
        "Entries": [
            {"ErrorCode": "AccessDeniedException", "ErrorMessage": refused[index]}
            if index in refused
            else next(sent)
            for index in range(len(entries))
        ],
    }


_convert_to_request_dict = BaseClient._convert_to_request_dict  # type: ignore[attr-defined]


def _request_dict_within_limits(
    self: BaseClient, api_params: dict[str, Any], operation_model: Any, *args: Any, **kwargs: Any
) -> Any:
    """botocore's request, once it has built one from the call's parameters (boto3's resources
    have converted their values by then, and botocore checked their shapes): refused here when
    AWS would refuse what it sends (`service_limits.check_sent`)."""
    request = _convert_to_request_dict(self, api_params, operation_model, *args, **kwargs)
    if current() is not None:
        service_limits.check_sent(_signing_service(self.meta.service_model), operation_model.name, api_params)
    return request


_PATCHED = Patched(
    [
        (BaseClient, "_make_api_call", _make_api_call_as_caller),
        (BaseClient, "_convert_to_request_dict", _request_dict_within_limits),
    ]
)


def install() -> Callable[[], None]:
    """Authorize every botocore client's calls, whatever session made it and when (a presigned
    URL is not a call: AWS never refuses to make one, only the request it signs), until the last
    runtime's undo."""
    return _PATCHED.install()
