"""Presigned S3 links, followed locally as S3 follows them.

Deployed, a tool reads its run's input through a link the worker presigns (`read_input`): S3
checks the link's signature and expiry, then authorizes the read as the signer, the worker's
role; the runner's own role reads no input. Locally there is no S3 at the link's host: a
`urllib` request of an `*.amazonaws.com` URL is answered by `follow` instead, which checks the
link and reads as the worker. In a tool's process (`aws_forwarding.py`) the request goes over
the broker's socket first (`aws_broker.py`); a tool that runs in the runtime's own process (an
agent registered in code) is answered there, through `install`.

A check means something only if a tool cannot sign a link itself. The runtime's functions sign
with `SECRET`, made afresh in each process and never in a tool process's environment (whose
credentials are placeholders, `tool_processes.py`), nor in a file. Every local function signs
with it: one boto3 session serves them all, so the link's signer is taken to be the worker, the
one function that makes links.
"""

import datetime
import email.message
import hashlib
import hmac
import io
import secrets
import urllib.error
import urllib.request
import urllib.response
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit
from xml.sax.saxutils import escape

from botocore.exceptions import ClientError

from toolpipe.infra.local.caller import FunctionContext, current, running_as
from toolpipe.infra.local.process_patch import Patched

# The local functions' secret access key: per process, so a link signed by one runtime process
# is not honoured by another (a link lives for one call).
SECRET = secrets.token_hex(20)
_ALGORITHM = "AWS4-HMAC-SHA256"
_DATE = "%Y%m%dT%H%M%SZ"
# What AWS allows a SigV4 presigned URL: 7 days.
_LONGEST_SECONDS = 7 * 24 * 3600


class LinkError(Exception):
    """A link S3 would refuse: `code` and `status` as S3 answers them."""

    def __init__(self, code: str, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


@dataclass(frozen=True)
class Link:
    """The object a checked link reads."""

    bucket: str
    key: str
    version_id: str | None


def check(url: str, now: datetime.datetime, secret: str = SECRET) -> Link:
    """The object `url` reads, if it is a GET presigned with `secret` and not yet expired.

    Raises:
        LinkError: what S3 answers a link that is not: unsigned, forged or altered, expired.
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    found = dict(query)
    if found.get("X-Amz-Algorithm") != _ALGORITHM or "X-Amz-Signature" not in found:
        raise LinkError("AccessDenied", "the request is not signed (no SigV4 query signature)")
    try:
        scope = found["X-Amz-Credential"].split("/")
        signed_at = datetime.datetime.strptime(found["X-Amz-Date"], _DATE).replace(tzinfo=datetime.UTC)
        lifetime = int(found["X-Amz-Expires"])
        signed_headers = found["X-Amz-SignedHeaders"]
    except (KeyError, ValueError):
        raise LinkError(
            "AuthorizationQueryParametersError", "the query's signature parameters are malformed", 400
        ) from None
    if len(scope) != 5 or scope[3:] != ["s3", "aws4_request"] or not 0 < lifetime <= _LONGEST_SECONDS:
        raise LinkError("AuthorizationQueryParametersError", "the query's credential scope is malformed", 400)
    if signed_headers != "host":
        raise LinkError("SignatureDoesNotMatch", "the link signs headers the local S3 cannot see")
    canonical = "\n".join(
        [
            "GET",
            parts.path or "/",
            "&".join(f"{_encode(k)}={_encode(v)}" for k, v in sorted(query) if k != "X-Amz-Signature"),
            f"host:{parts.netloc.lower()}\n",
            "host",
            "UNSIGNED-PAYLOAD",
        ]
    )
    date, region = scope[1], scope[2]
    to_sign = "\n".join(
        [
            _ALGORITHM,
            found["X-Amz-Date"],
            f"{date}/{region}/s3/aws4_request",
            hashlib.sha256(canonical.encode()).hexdigest(),
        ]
    )
    key = f"AWS4{secret}".encode()
    for part in (date, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, found["X-Amz-Signature"]):
        raise LinkError(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided.",
        )
    if now > signed_at + datetime.timedelta(seconds=lifetime):
        raise LinkError("AccessDenied", "Request has expired")
    bucket, object_key = _object(parts.netloc.lower(), parts.path)
    return Link(bucket, object_key, found.get("versionId"))


def _encode(value: str) -> str:
    return quote(value, safe="-_.~")


def _object(host: str, path: str) -> tuple[str, str]:
    """(bucket, key) of a virtual-hosted (`b.s3.amazonaws.com/k`) or path-style URL."""
    name = host.split(":")[0]
    if not name.endswith(".amazonaws.com"):
        raise LinkError("InvalidRequest", f"{name[:80]} is not an S3 endpoint", 400)
    service = name.removesuffix(".amazonaws.com")
    if service == "s3" or service.startswith(("s3.", "s3-")):  # path style: /bucket/key
        bucket, _, key = path.lstrip("/").partition("/")
    else:
        bucket, _, _ = service.partition(".s3")
        key = path.lstrip("/")
    if not bucket or not key:
        raise LinkError("InvalidRequest", "the link names no object", 400)
    return bucket, unquote(key)


# The request headers a link's GET passes on, as get_object's parameters.
_PASSED_ON = {"range": "Range", "if-match": "IfMatch", "if-none-match": "IfNoneMatch"}


def follow(url: str, headers: dict[str, Any], runner: FunctionContext, s3: Any) -> dict[str, Any]:
    """A GET of `url` by a tool of `runner`, as S3 answers it: status, headers and body (an S3
    error document when refused). `s3`: a client of the runtime's, which reads as the signer."""
    sent = {str(name).lower(): str(value) for name, value in headers.items()}
    try:
        link = check(url, datetime.datetime.now(datetime.UTC))
    except LinkError as e:
        return _s3_error(e.status, e.code, e.message)
    if runner.link_signer is None:
        return _s3_error(403, "AccessDenied", f"{runner.name} follows no link")
    params: dict[str, Any] = {"Bucket": link.bucket, "Key": link.key}
    if link.version_id is not None:
        params["VersionId"] = link.version_id
    for header, param in _PASSED_ON.items():
        if header in sent:
            params[param] = sent[header]
    try:
        with running_as(runner.link_signer):
            response = s3.get_object(**params)
    except ClientError as e:
        error = e.response.get("Error", {})
        status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 403))
        return _s3_error(status, str(error.get("Code", "")), str(error.get("Message", "")))
    body = response["Body"].read()
    answered = {"Content-Length": str(len(body)), "ETag": response.get("ETag", "")}
    if "ContentRange" in response:
        answered["Content-Range"] = response["ContentRange"]
    return {"status": 206 if "ContentRange" in response else 200, "headers": answered, "body": body}


def _s3_error(status: int, code: str, message: str) -> dict[str, Any]:
    document = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{escape(code)}</Code><Message>{escape(message)}</Message></Error>"
    )
    return {"status": status, "headers": {"Content-Type": "application/xml"}, "body": document.encode()}


class LinkHandler(urllib.request.BaseHandler):
    """`urlopen` of an AWS URL, answered by `answer(url, headers)` (`follow`'s answer, or None
    to let urllib send it); any other URL as ever."""

    handler_order = 100  # before urllib's own HTTP(S) handlers (500)

    def __init__(self, answer: Callable[[str, dict[str, str]], dict[str, Any] | None]) -> None:
        self._answer = answer

    def http_open(self, request: urllib.request.Request) -> urllib.response.addinfourl | None:
        return self._open(request)

    def https_open(self, request: urllib.request.Request) -> urllib.response.addinfourl | None:
        return self._open(request)

    def _open(self, request: urllib.request.Request) -> urllib.response.addinfourl | None:
        if not request.host.split(":")[0].lower().endswith(".amazonaws.com"):
            return None
        if request.get_method() != "GET":
            raise urllib.error.URLError("the local AWS answers presigned GETs only")
        link = self._answer(request.full_url, dict(request.header_items()))
        if link is None:
            return None
        headers = email.message.Message()
        for name, value in link["headers"].items():
            headers[name] = value
        response = urllib.response.addinfourl(
            io.BytesIO(link["body"]), headers, request.full_url, link["status"]
        )
        response.msg = HTTPStatus(link["status"]).phrase  # type: ignore[attr-defined]  # urllib's error processor reads it
        return response


def _in_process(url: str, headers: dict[str, str]) -> dict[str, Any] | None:
    runner = current()
    if runner is None or runner.link_signer is None:
        return None  # not a tool's request: the network's, as ever
    import boto3  # the runtime's own session, in this process (moto's)

    return follow(url, headers, runner, boto3.client("s3", region_name="us-east-1"))


_PATCHED = Patched([(urllib.request, "_opener", urllib.request.build_opener(LinkHandler(_in_process)))])


def install() -> Callable[[], None]:
    """Links followed in this process, by a tool run in it, until the last runtime's undo."""
    return _PATCHED.install()
