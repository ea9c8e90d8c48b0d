"""A request's service and handler are looked up once per URL, not by trying every service.

moto: `BotocoreStubber.process_request` finds who serves a request by matching its URL against
each of moto's 183 services' patterns in turn (DynamoDB is the 52nd, SQS the 163rd), then
builds that service's table of URLs anew and compiles each URL until one matches, on every
request.

Why it matters: that search was ~6% of the local runtime's CPU in a tool turn (py-spy, the
`benchmarks.pipeline` agent): 20-150 µs a request before moto starts serving it, and a turn makes
~25 requests. Every request of the test suite pays it too.

The patch: the search's answer (the service, and the handler of the first of its URLs that
matches) depends on the URL alone, as moto's tables are fixed at import: it is kept, for the
last 4,096 URLs (a JSON service has one URL per region; a REST one, one per resource). Per
request, as before: the passthrough and allow-list settings are read for that service, the
request is recorded and the handler is called. A URL no service serves is answered as moto does:
"Not yet implemented" under AWS's domain, else nothing (not moto's to serve).
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

# moto's own method, which the tests compare the patch's answers with.
_motos_own: Callable[[BotocoreStubber, Any], Any] = BotocoreStubber.process_request
# What moto answers a URL under AWS's domain that no service serves (anything else: not moto's).
_AWS_URL = re.compile(r"https?://.+\.amazonaws.com/.*")

Handler = Callable[[Any, str, Any], tuple[int, dict[str, Any], Any]]


@functools.lru_cache(maxsize=4096)
def route(clean_url: str) -> tuple[str, Handler] | None:
    """The service and handler moto's search would pick for `clean_url`, or None: no service's
    patterns and URLs both match. The same loops as moto's, in the same order."""
    for service, pattern in backend_index.backend_url_patterns:
        if not pattern.match(clean_url):
            continue
        backend_dict = backends.get_backend(service)  # type: ignore[call-overload]
        if isinstance(backend_dict, BackendDict):
            regions = backend_dict[DEFAULT_ACCOUNT_ID]
            backend = regions["us-east-1"] if "us-east-1" in regions else regions["aws"]
        else:
            backend = backend_dict["global"]
        for url, handler in backend.urls.items():
            if re.compile(url).match(clean_url):
                return service, handler
    return None


def process_request(self: BotocoreStubber, request: Any) -> Any:
    """moto's `process_request`, its service and handler found by `route`."""
    parsed_url, _ = get_equivalent_url_in_aws_domain(request.url)
    clean_url = f"{parsed_url.scheme}://{parsed_url.netloc}{parsed_url.path}"
    if passthrough_url(clean_url):
        return None
    found = route(clean_url)
    if found is None:
        return (404, {}, "Not yet implemented") if _AWS_URL.match(clean_url) else None
    service, handler = found
    if passthrough_service(service):
        return None
    if not service_whitelisted(service):
        raise ServiceNotWhitelisted(service)
    normalized = normalize_request(request)
    try:
        recorder._record_request(normalized)
        status, headers, body = handler(normalized, normalized.raw_url, normalized.headers)
    except HTTPException as e:
        return e.code, e.get_headers(), e.get_body()
    return status, headers, body


def install() -> None:
    BotocoreStubber.process_request = process_request  # type: ignore[method-assign]
