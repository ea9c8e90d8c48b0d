"""A request's service and handler are looked up once per URL, not by trying every service.

moto: `BotocoreStubber.process_request` finds who serves a request by matching its URL against
each of moto's 183 services' patterns in turn (DynamoDB is the 52nd, SQS the 163rd), then
builds that service's table of URLs anew and compiles each URL until one matches, on every
request.

Why it matters: that search was ~6% of the local runtime's CPU in a tool turn (py-spy, the
`benchmarks.pipeline` agent): 20-150 µs a request before moto starts serving it, and a turn makes
~25 requests. Every request of the test suite pays it too.

The patch: what the search meets (the services whose host pattern matches, up to the first with
a URL that matches, and that URL's handler) depends on the URL alone, as moto's tables are fixed
at import: it is kept, for the last 4,096 URLs up to 512 characters (a JSON service has one URL
per region; a REST one, one per resource). Per request, as moto does: each service met is checked
against the passthrough and allow-list settings, then its handler is called (or the next service
tried), and the request is recorded. A URL no service serves is answered as moto does: "Not yet
implemented" under AWS's domain, else nothing (not moto's to serve).
"""

import functools
import re
from collections.abc import Callable
from typing import Any

import moto.backend_index as backend_index
import moto.backends as backends
from moto.core.base_backend import BackendDict
from moto.core.botocore_stubber import BotocoreStubber
from moto.core.config import passthrough_service, passthrough_url, service_whitelisted
from moto.core.exceptions import ServiceNotWhitelisted
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.core.request import normalize_request
from moto.core.utils import get_equivalent_url_in_aws_domain
from moto.moto_api import recorder
from werkzeug.exceptions import HTTPException

CHECKED_WITH = ("5.2.5",)

# moto's own method, as it was before `install`: the tests compare the patch's answers with it.
_motos_own: Callable[[BotocoreStubber, Any], Any] = BotocoreStubber.process_request
# What moto answers a URL under AWS's domain that no service serves (anything else: not moto's).
_AWS_URL = re.compile(r"https?://.+\.amazonaws.com/.*")

Handler = Callable[[Any, str, Any], tuple[int, dict[str, Any], Any]]


# A URL this long is searched every time, not kept: a tool may make any number of long S3 keys,
# and the kept URLs would hold their memory for the process's life.
MAX_KEPT_URL = 512


def route(clean_url: str) -> tuple[tuple[str, Handler | None], ...]:
    """What moto's search meets for `clean_url`, in its order: each service whose host pattern
    matches, up to the first with a URL that matches, and that URL's handler (None for those
    before it). Kept per URL, as moto's tables are fixed at import."""
    return _kept_route(clean_url) if len(clean_url) <= MAX_KEPT_URL else _search(clean_url)


def _search(clean_url: str) -> tuple[tuple[str, Handler | None], ...]:
    met: list[tuple[str, Handler | None]] = []
    for service, pattern in backend_index.backend_url_patterns:
        if not pattern.match(clean_url):
            continue
        backend_dict = backends.get_backend(service)  # type: ignore[call-overload]
        if isinstance(backend_dict, BackendDict):
            regions = backend_dict[DEFAULT_ACCOUNT_ID]
            backend = regions["us-east-1"] if "us-east-1" in regions else regions["aws"]
        else:
            backend = backend_dict["global"]
        handler = next((h for url, h in backend.urls.items() if re.compile(url).match(clean_url)), None)
        met.append((service, handler))
        if handler is not None:
            break
    return tuple(met)


_kept_route = functools.lru_cache(maxsize=4096)(_search)


def process_request(self: BotocoreStubber, request: Any) -> Any:
    """moto's `process_request`, what its search meets found by `route`. As moto does, each
    service met is checked against the passthrough and allow-list settings (read per request)
    before its handler, or the next service, is tried."""
    parsed_url, _ = get_equivalent_url_in_aws_domain(request.url)
    clean_url = f"{parsed_url.scheme}://{parsed_url.netloc}{parsed_url.path}"
    if passthrough_url(clean_url):
        return None
    for service, handler in route(clean_url):
        if passthrough_service(service):
            return None
        if not service_whitelisted(service):
            raise ServiceNotWhitelisted(service)
        if handler is None:
            continue
        normalized = normalize_request(request)
        try:
            recorder._record_request(normalized)
            status, headers, body = handler(normalized, normalized.raw_url, normalized.headers)
        except HTTPException as e:
            return e.code, e.get_headers(), e.get_body()
        return status, headers, body
    return (404, {}, "Not yet implemented") if _AWS_URL.match(clean_url) else None


def install() -> None:
    BotocoreStubber.process_request = process_request  # type: ignore[method-assign]
