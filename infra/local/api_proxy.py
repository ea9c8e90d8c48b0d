"""API Gateway in front of the `api` function, as `toolpipe serve` stands in for it.

Each HTTP request under the deployed stage (`/v1`) becomes the REST API *proxy* event the
function gets on AWS (method, path, resource and path parameters, query and headers single and
multi-valued, body, and a request context with the stage, the resource path and the caller's
identity), and the proxy response goes back as status, headers and body.

Identity: API Gateway authenticates callers with IAM and reports the signer's ARN in
`requestContext.identity.userArn`. Locally every request is from `LOCAL_CALLER`, unless it
carries `X-Toolpipe-Caller: <arn>` (an empty value sends no identity at all, which the API
answers with 403).
"""

import base64
import json
import logging
import threading
import urllib.parse
import uuid
from datetime import UTC, datetime
from typing import Any

from toolpipe.infra.cdk.functions import API
from toolpipe.infra.local import lambdas
from toolpipe.infra.local.client import CALLER_HEADER, STAGE
from toolpipe.infra.local.runtime import LOCAL_CALLER

log = logging.getLogger(__name__)

RESOURCES: dict[str, tuple[str, ...]] = {
    "/openapi.json": ("GET",),
    "/runs": ("GET", "POST"),
    "/runs/{run_id}": ("GET", "DELETE"),
    "/runs/{run_id}/cancel": ("POST",),
    "/runs/{run_id}/resume": ("POST",),
    "/runs/{run_id}/fork": ("POST",),
    "/runs/{run_id}/messages": ("GET",),
    "/runs/{run_id}/messages/{seq}": ("GET",),
    "/runs/{run_id}/timeline": ("GET",),
    # The timeline pages (README "The timeline page"), behind the same identity as the rest.
    "/ui/runs": ("GET",),
    "/ui/runs/{run_id}": ("GET",),
    "/approvals": ("GET",),
    "/approvals/{approval_id}": ("GET",),
    "/approvals/{approval_id}/approve": ("POST",),
    "/approvals/{approval_id}/deny": ("POST",),
    "/approvals/{approval_id}/answer": ("POST",),
    "/runs/{run_id}/calls/{call_id}/result": ("POST",),
    # The approval page (README "The approval link"): no identity needed, the link is signed.
    "/approvals/{approval_id}/page": ("GET", "HEAD", "POST"),
}
EVENTS_RESOURCE = "/runs/{run_id}/events"
MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's payload limit


def match_resource(path: str) -> tuple[str, dict[str, str]] | None:
    """The resource template a path falls under and its path parameters, as API Gateway matches."""
    segments = path.strip("/").split("/")
    for template in (*RESOURCES, EVENTS_RESOURCE):
        parts = template.strip("/").split("/")
        if len(parts) != len(segments):
            continue
        parameters: dict[str, str] = {}
        for part, segment in zip(parts, segments, strict=True):
            if part.startswith("{"):
                if not segment:
                    break
                parameters[part[1:-1]] = urllib.parse.unquote(segment)
            elif part != segment:
                break
        else:
            return template, parameters
    return None


def proxy_event(
    method: str,
    path: str,
    query: str,
    headers: list[tuple[str, str]],
    body: bytes,
    caller: str | None,
    *,
    source_ip: str = "127.0.0.1",
) -> dict[str, Any]:
    """The REST API proxy event for a request to `path` (relative to the stage) on a known resource."""
    matched = match_resource(path)
    resource, parameters = matched if matched else (path, {})
    values = urllib.parse.parse_qs(query, keep_blank_values=True)
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for name, value in headers:
        single[name] = value  # API Gateway keeps the last of repeated headers here
        multi.setdefault(name, []).append(value)
    try:
        text, encoded = body.decode(), False
    except UnicodeDecodeError:
        # Not text: handed over base64-encoded, as API Gateway does for a binary payload.
        text, encoded = base64.b64encode(body).decode(), True
    now = datetime.now(UTC)
    identity: dict[str, Any] = {"sourceIp": source_ip, "userAgent": single.get("User-Agent")}
    if caller is not None:
        identity.update(userArn=caller, caller=caller.rsplit("/", 1)[-1], user=caller.rsplit("/", 1)[-1])
    return {
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": single or None,
        "multiValueHeaders": multi or None,
        "queryStringParameters": {k: v[-1] for k, v in values.items()} or None,
        "multiValueQueryStringParameters": values or None,
        "pathParameters": parameters or None,
        "stageVariables": None,
        "requestContext": {
            "accountId": "000000000000",
            "apiId": "local",
            "resourceId": "local",
            "resourcePath": resource,
            "httpMethod": method,
            "path": f"/{STAGE}{path}",
            "stage": STAGE,
            "protocol": "HTTP/1.1",
            "requestId": str(uuid.uuid4()),
            "requestTime": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "requestTimeEpoch": int(now.timestamp() * 1000),
            "identity": identity,
        },
        "body": text if body else None,
        "isBase64Encoded": encoded,
    }


class ApiFunction:
    """The `api` function, invoked as Lambda invokes it: one event at a time per instance.

    One at a time is not only faithful: Powertools' resolver keeps the event being handled on
    the module-level `app`, so two requests handled at once could read each other's caller.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            try:
                response = lambdas.call_function(API, event)
            except Exception:
                # What API Gateway answers when the function itself fails.
                log.exception("api function failed")
                body = {"statusCode": 502, "message": "Internal server error"}
                return {"statusCode": 502, "body": json.dumps(body)}
        return dict(response)

    def get(
        self, path: str, caller: str | None, headers: list[tuple[str, str]] | None = None
    ) -> tuple[int, Any]:
        """A GET through the same proxy event as HTTP, so the same authorization applies."""
        resource, _, query = path.partition("?")
        response = self(proxy_event("GET", resource, query, headers or [], b"", caller))
        body = response.get("body")
        return int(response["statusCode"]), json.loads(body) if body else None


def request_caller(headers: list[tuple[str, str]]) -> str | None:
    for name, value in headers:
        if name.lower() == CALLER_HEADER.lower():
            return value.strip() or None
    return LOCAL_CALLER


def forwarded(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    # The identity header is the local stand-in for IAM: the function only ever sees its result.
    return [(n, v) for n, v in headers if n.lower() != CALLER_HEADER.lower()]


def map_response(response: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
    """A proxy response as HTTP: status, single and multi-valued headers, body (base64 decoded)."""
    headers: list[tuple[str, str]] = []
    multi = response.get("multiValueHeaders") or {}
    for name, values in multi.items():
        headers.extend((name, str(v)) for v in values)
    for name, value in (response.get("headers") or {}).items():
        if name not in multi:
            headers.append((name, str(value)))
    raw = response.get("body") or ""
    body = base64.b64decode(raw) if response.get("isBase64Encoded") else str(raw).encode()
    return int(response["statusCode"]), headers, body
