"""The AWS APIs the local runtime emulates, over HTTP: `aws --endpoint-url`, boto3 `endpoint_url=`.

Each HTTP request goes to moto the way an in-process boto3 request does: rebuilt as the request
botocore would have sent to AWS (service and region from its SigV4 credential scope, the AWS host
name, path, query, headers and body as sent) and handed to moto's botocore dispatch,
`BotocoreStubber.process_request`. That is the method infra/local/serial.py wraps, so a request
over HTTP takes the same lock, is journaled by infra/local/persistence.py and wakes the same
listeners (tool workers, event streams) as the handlers' own requests, with no second path to
keep in step. moto's own server (`ThreadedMotoServer`, its Flask apps) reaches the same backends
but dispatches around that method: requests sent through it would be neither serialised nor
journaled, and lost at the next start.

Credentials and signatures are not checked (moto does not): any access key works. The region is
the one the request is signed for; the runtime's resources are in us-east-1. moto's control API
(`/moto-api`, which can reset every backend behind the journal's back) is not served.
"""

import contextlib
import json
import logging
import math
import re
import threading
import time
from collections.abc import Iterable, Iterator
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote, urlsplit
from xml.sax.saxutils import escape

from botocore.awsrequest import AWSPreparedRequest
from botocore.compat import HTTPHeaders
from botocore.model import OperationNotFoundError
from moto.core.botocore_stubber import BotocoreStubber
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
from werkzeug.wsgi import get_input_stream

from toolpipe.infra.local import stopping
from toolpipe.infra.local.client import http_url

log = logging.getLogger(__name__)

# `Credential=AKID/20250101/us-east-1/s3/aws4_request`, in the Authorization header or, for a
# presigned URL, in X-Amz-Credential.
_SCOPE = re.compile(r"[^/\s,=]+/\d{8}/([a-z0-9-]+)/([a-z0-9-]+)/aws4_request")
# Signing names that differ from the host name moto routes by.
_SIGNING_TO_HOST = {"eventbridge": "events"}
# What moto itself assumes for a request that carries no signature (a plain `curl` of an object).
_UNSIGNED = ("s3", "us-east-1")
# Set by the HTTP server itself; moto's own values would go out twice.
_HOP_HEADERS = frozenset({"date", "server", "connection", "transfer-encoding", "keep-alive"})
_HEADERS_KEY = "toolpipe.headers"
_TARGET_KEY = "toolpipe.target"


class _Handler(WSGIRequestHandler):
    # Nagle plus delayed ACK add ~40 ms to a response written in pieces.
    disable_nagle_algorithm = True

    def make_environ(self) -> dict[str, Any]:
        environ = super().make_environ()
        # WSGI folds header names (and drops any with `_`, as in S3 metadata) and decodes the
        # path; the request moto gets is rebuilt from what was sent.
        environ[_HEADERS_KEY] = list(self.headers.items())
        environ[_TARGET_KEY] = self.path
        return environ

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # object keys and queue names are not console material


class AwsEndpoint:
    """`with AwsEndpoint(host, port) as endpoint:` the emulated AWS APIs on `endpoint.url`.

    Args:
        host: The address to bind (the API server's).
        port: 0 picks a free port.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._stubber = BotocoreStubber()
        self._active = 0
        self._state = threading.Condition()
        self._closing = False
        self._last_activity: float | None = None
        # Binds now (an address in use fails here, before anything is printed); serves from
        # `__enter__` on a thread of its own.
        self._http: BaseWSGIServer = make_server(host, port, self, threaded=True, request_handler=_Handler)
        self._thread = threading.Thread(
            target=self._http.serve_forever, args=(stopping.POLL_SECONDS,), name="local-aws", daemon=True
        )

    @property
    def url(self) -> str:
        return http_url(self._http.server_address)

    def __enter__(self) -> "AwsEndpoint":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, timeout: float = 10.0) -> None:
        """Stop accepting and let requests in progress finish (bounded): a write that moto
        applied after the state was saved would be lost."""
        with self._state:
            self._closing = True
        stopping.stop(self._http, self._thread)
        self._http.server_close()
        with self._state:
            self._state.wait_for(lambda: not self._active, timeout)

    def idle_seconds(self) -> float:
        """How long no request has been in progress (0 while one is): a server started for a
        client's duration stays up while tools use its AWS endpoint."""
        with self._state:
            if self._active:
                return 0.0
            # Never used: no tool is using it (a server started for a client's duration that
            # client released stops without waiting for an endpoint nobody called).
            return math.inf if self._last_activity is None else time.monotonic() - self._last_activity

    @contextlib.contextmanager
    def _request(self) -> Iterator[bool]:
        with self._state:
            accepted = not self._closing
            if accepted:
                self._active += 1
        try:
            yield accepted
        finally:
            if accepted:
                with self._state:
                    self._active -= 1
                    self._last_activity = time.monotonic()
                    self._state.notify_all()

    # --- WSGI -------------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        headers: list[tuple[str, str]] = environ[_HEADERS_KEY]
        body = get_input_stream(environ).read()
        with self._request() as accepted:
            if accepted:
                status, response_headers, data = self.dispatch(
                    environ["REQUEST_METHOD"], environ[_TARGET_KEY], headers, body
                )
            else:
                status, response_headers, data = _error(
                    503, "ServiceUnavailable", "the local runtime is stopping", False
                )
        if environ["REQUEST_METHOD"] == "HEAD":
            data = b""  # the headers (Content-Length included) describe the object, as on AWS
        else:
            response_headers = [(n, v) for n, v in response_headers if n.lower() != "content-length"]
            response_headers.append(("Content-Length", str(len(data))))
        start_response(f"{status} {_reason(status)}", response_headers)
        return [data]

    def dispatch(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request as moto answers it in-process: status, headers, body."""
        parts = urlsplit(target)
        path = parts.path or "/"
        json_protocol = any(n.lower() == "x-amz-target" for n, _ in headers)
        host = _aws_host(headers, parts.query)
        if host.startswith("motoapi."):
            # Routed by signature like the rest, `/moto-api/...` is an S3 path here; only a request
            # signed for moto's own service would reach it.
            return _error(404, "NotFound", "moto's control API is not served here", json_protocol)
        request_headers = HTTPHeaders()
        for name, value in headers:
            if name.lower() != "host":
                request_headers[name] = value
        request_headers["Host"] = host
        url = f"https://{host}{path}" + (f"?{parts.query}" if parts.query else "")
        request = AWSPreparedRequest(method, url, request_headers, body, stream_output=False)
        try:
            # Looked up on each call: the wrappers (lock, journal, listeners) are installed on the
            # class after this module is imported.
            response = BotocoreStubber.process_request(self._stubber, request)
        except OperationNotFoundError as e:
            return _error(400, "UnknownOperationException", f"unknown operation {e}", json_protocol)
        except Exception as e:
            # moto answers a request it cannot parse with an exception, not an AWS error: here it
            # becomes the 500 AWS gives for an internal failure, and the server goes on.
            log.warning("local aws request failed", extra={"error": type(e).__name__})
            return _error(500, "InternalFailure", f"{type(e).__name__}: {e}", json_protocol)
        if response is None:
            return _error(404, "UnknownOperation", f"no emulated AWS API at {host}", json_protocol)
        status, response_headers, response_body = response
        data = response_body.encode() if isinstance(response_body, str) else bytes(response_body or b"")
        kept = [
            (str(n), str(v))
            for n, v in dict(response_headers or {}).items()
            if str(n).lower() not in _HOP_HEADERS
        ]
        return int(status), kept, data


def _aws_host(headers: list[tuple[str, str]], query: str) -> str:
    """The AWS host name the request would have gone to: `{service}.{region}.amazonaws.com`,
    or a bucket's virtual host when it was sent to `BUCKET.localhost`."""
    found = None
    for name, value in headers:
        if name.lower() == "authorization":
            found = _SCOPE.search(value)
    if found is None and "X-Amz-Credential" in query:
        found = _SCOPE.search(unquote(query))
    region, service = (found[1], found[2]) if found else (_UNSIGNED[1], _UNSIGNED[0])
    service = _SIGNING_TO_HOST.get(service, service)
    target = next((v for n, v in headers if n.lower() == "x-amz-target"), "")
    if service == "dynamodb" and target.startswith("DynamoDBStreams"):
        return f"streams.dynamodb.{region}.amazonaws.com"
    if service == "s3":
        sent_to = next((v for n, v in headers if n.lower() == "host"), "").rsplit(":", 1)[0]
        bucket, _, rest = sent_to.partition(".")
        if rest == "localhost" and bucket:
            return f"{bucket}.s3.{region}.amazonaws.com"
    return f"{service}.{region}.amazonaws.com"


def _reason(status: int) -> str:
    return HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""


def _error(
    status: int, code: str, message: str, json_protocol: bool
) -> tuple[int, list[tuple[str, str]], bytes]:
    """An error in the shape the client's protocol parses: JSON for `X-Amz-Target` APIs, XML else."""
    if json_protocol:
        body = json.dumps({"__type": code, "message": message}).encode()
        return status, [("Content-Type", "application/x-amz-json-1.0")], body
    xml = f"<ErrorResponse><Error><Code>{escape(code)}</Code><Message>{escape(message)}</Message></Error></ErrorResponse>"
    return status, [("Content-Type", "text/xml")], xml.encode()
