"""A request's WSGI environment is built directly, not through werkzeug's test client builder.

moto: every request botocore sends is turned into a werkzeug request
(`moto.core.request.Request.from_primitives`) through `Request.from_values`, which makes an
`EnvironBuilder`: a `Headers` object, a copy of it, properties that read and write it, a form
and files it never fills, and a stream it seeks to measure.

Why it matters: that was ~75 µs of each request, ~8% of what moto spends answering one, and a
tool turn makes ~25 requests; every request of the test suite pays it too.

The patch: for what botocore sends (a body of bytes, text or nothing; no form to encode), the
environment is built as `EnvironBuilder.get_environ` builds it, with werkzeug's own encoding
functions, and the request is made from it as `from_values` makes it. Anything else (a body
that is a stream, a header value with a line break, an empty form body) takes moto's own path,
which gives the same request or raises the same error. A test compares the two environments
key by key for every kind of request the runtime sends. It mirrors werkzeug's builder, so it is
applied only with the werkzeug series it was checked with.
"""

import functools
import importlib.metadata
import sys
from collections.abc import Callable
from io import BytesIO
from typing import Any
from urllib.parse import unquote, urlparse, urlsplit

from moto.core.request import (  # type: ignore[attr-defined]  # moto's own, imported in a try
    PRESERVED_HEADER_NAMES_ENVIRON_KEY,
    AwsChunkedWrapper,
    Request,
)
from moto.core.request import environ_key_for_header as _environ_key
from moto.core.request import should_preserve_original_header_name as _preserved
from werkzeug._internal import _wsgi_encoding_dance
from werkzeug.test import EnvironBuilder
from werkzeug.urls import iri_to_uri

CHECKED_WITH = ("5.2.5",)
# werkzeug is moto's dependency, not pinned by moto or us: another series keeps moto's own path.
CHECKED_WITH_WERKZEUG = ("3.1",)

# moto's own method, as it was before `install`: the tests compare the patch's answers with it.
_motos_own: Callable[..., Request] = Request.from_primitives.__func__  # type: ignore[attr-defined]

# Empty bodies of these types make werkzeug encode a form (none here): moto's own path builds them.
_FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")


def environ(method: str, url: str, headers: Any, body: bytes | str) -> dict[str, Any] | None:
    """The environment `EnvironBuilder(...).get_environ()` builds from moto's arguments for this
    request, or None where it would take a path this does not follow."""
    header_items: list[tuple[str, str]] = []
    content_type: str | None = None
    for key, value in headers.items():
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        elif not isinstance(value, str):
            return None
        if "\n" in value or "\r" in value:
            return None  # werkzeug refuses it: moto's path raises its error
        lowered = key.lower()
        if lowered == "transfer-encoding":
            continue
        if lowered == "content-type" and content_type is None:
            content_type = value
        header_items.append((key, value))
    data = body.encode() if isinstance(body, str) else body
    if not data and content_type is not None and content_type.partition(";")[0].strip() in _FORM_TYPES:
        return None

    parsed = urlparse(url)  # as moto's: a path's `;params` are dropped
    scheme, host, script_root = _base(parsed.scheme, parsed.netloc)
    path = parsed.path
    raw_uri = _wsgi_encoding_dance(path)
    result: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "SCRIPT_NAME": _wsgi_encoding_dance(unquote(script_root.rstrip("/"))),
        "PATH_INFO": _wsgi_encoding_dance(unquote(iri_to_uri(urlsplit(path).path))),
        "QUERY_STRING": _wsgi_encoding_dance(parsed.query),
        "REQUEST_URI": raw_uri,
        "RAW_URI": raw_uri,
        "SERVER_NAME": host.partition(":")[0],
        "SERVER_PORT": str(_port(host, scheme)),
        "HTTP_HOST": host,
        "SERVER_PROTOCOL": EnvironBuilder.server_protocol,
        "wsgi.version": EnvironBuilder.wsgi_version,
        "wsgi.url_scheme": scheme,
        "wsgi.input": BytesIO(data),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    if content_type is not None:
        result["CONTENT_TYPE"] = content_type
    if data:
        result["CONTENT_LENGTH"] = str(len(data))
    combined: dict[str, list[str]] = {}
    for key, value in header_items:
        lowered = key.lower()
        if lowered in ("content-type", "content-length"):
            continue
        combined.setdefault(f"HTTP_{key.upper().replace('-', '_')}", []).append(value)
    for key, values in combined.items():
        result[key] = ", ".join(values)
    # What moto's own method adds after werkzeug's.
    result[PRESERVED_HEADER_NAMES_ENVIRON_KEY] = {
        _environ_key(key): key for key, _ in header_items if _preserved(key)
    }
    result.setdefault("CONTENT_LENGTH", "0")
    return result


@functools.lru_cache(maxsize=256)  # one per endpoint (and S3 bucket): bounded, a tool may make any
def _base(scheme: str, netloc: str) -> tuple[str, str, str]:
    """`EnvironBuilder.base_url`'s setter: the scheme, host and script root of moto's base URL."""
    scheme, host, script_root, _, _ = urlsplit(iri_to_uri(f"{scheme}://{netloc}"))
    return scheme, host, script_root


def _port(host: str, scheme: str) -> int:
    """`EnvironBuilder.server_port`."""
    _, sep, port = host.partition(":")
    if sep:
        try:
            return int(port)
        except ValueError:
            pass
    return 443 if scheme == "https" else 80


def from_primitives(cls: type[Request], method: str, url: str, headers: Any, body: Any = None) -> Request:
    if isinstance(body, AwsChunkedWrapper):  # as moto's own: an S3 upload's checksummed body
        body = body.read()
    if body is None or isinstance(body, (bytes, str)):
        built = environ(method, url, headers, b"" if body is None else body)
        if built is not None:
            return cls(built)
    return _motos_own(cls, method, url, headers, body)


def install() -> None:
    if ".".join(importlib.metadata.version("werkzeug").split(".")[:2]) not in CHECKED_WITH_WERKZEUG:
        return
    Request.from_primitives = classmethod(from_primitives)  # type: ignore[method-assign, assignment]
