"""Real requests and answers checked against an OpenAPI document with openapi-core, a validator
independent of the code that generates the document (issue 35)."""

import json
import urllib.parse
from typing import Any

from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse

HOST = "http://127.0.0.1"
# The local server's caller header: the served document's `localCaller` scheme names it.
CALLER = {"X-Toolpipe-Caller": "arn:aws:iam::000000000000:user/local"}


def checker(document: dict[str, Any]) -> OpenAPI:
    """The document, parsed and checked once (openapi-core refuses one that is not valid)."""
    return OpenAPI.from_dict(document)


def request_conforms(
    spec: OpenAPI, method: str, target: str, body: Any = None, headers: dict[str, str] | None = None
) -> None:
    """Raises if the request `method target` (a path under the stage, with its query) with JSON
    `body` is not one the document admits."""
    path, _, query = target.partition("?")
    request = MockRequest(
        HOST,
        method.lower(),
        f"/v1{path}",
        args=dict(urllib.parse.parse_qsl(query)),
        headers={**CALLER, **(headers or {})},
        data=None if body is None else json.dumps(body).encode(),
    )
    spec.validate_request(request)


def response_conforms(
    spec: OpenAPI,
    method: str,
    target: str,
    status: int,
    body: Any,
    request_body: Any = None,
    headers: dict[str, str] | None = None,
) -> None:
    """Raises if `status` and JSON `body` are not an answer the document gives `method target`."""
    path, _, query = target.partition("?")
    request = MockRequest(
        HOST,
        method.lower(),
        f"/v1{path}",
        args=dict(urllib.parse.parse_qsl(query)),
        headers=CALLER,
        data=None if request_body is None else json.dumps(request_body).encode(),
    )
    data = b"" if body is None else json.dumps(body).encode()
    spec.validate_response(request, MockResponse(data, status_code=status, headers=headers or {}))
