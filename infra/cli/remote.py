"""`toolpipe run/show/… --api URL`: the `Session` of a deployed runs API instead of the local server.

The same HTTP client as for the local server (`infra.local.client.Client`), given the stage URL
and a hook that authenticates each request the way the stack's `api_auth` wants it:

- `iam` (the default): signed with SigV4 by botocore (`SigV4Auth`, service `execute-api`), with
  the credentials of the default chain (environment, `~/.aws`, SSO, an instance role), in the
  region of the API's URL (`….execute-api.REGION.amazonaws.com`), else the session's;
- `api_key`: the key in an `x-api-key` header (`--api-key` or `TOOLPIPE_API_KEY`).

botocore is imported only here, and only when signing: a local `toolpipe run` never loads it.
"""

import re
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

from toolpipe.infra.local.client import IDEMPOTENCY_KEY, Auth, Client, ServerError

API_URL_ENV = "TOOLPIPE_API_URL"
API_KEY_ENV = "TOOLPIPE_API_KEY"
API_KEY_HEADER = "x-api-key"
SIGNING_SERVICE = "execute-api"
# API Gateway's default domain: https://{api-id}.execute-api.{region}.amazonaws.com[.cn]/{stage}
_EXECUTE_API_HOST = re.compile(r"[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?")
# Headers SigV4 adds; what it reads of the request is signed in place.
_SIGNATURE_HEADERS = ("authorization", "x-amz-date", "x-amz-security-token")


def api_key_auth(key: str) -> Auth:
    """Sends the API key with each request (the stack's `api_auth=api_key`)."""

    def add_key(method: str, url: str, headers: dict[str, str], body: bytes | None) -> dict[str, str]:
        return {API_KEY_HEADER: key}

    return add_key


def sigv4_auth(api_url: str, session: Any = None) -> Auth:
    """Signs each request with SigV4 for `execute-api` (the stack's default `api_auth=iam`).

    Raises:
        ServerError: no credentials, or no region, could be found (before anything is sent).
    """
    import botocore.session
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    session = session or botocore.session.get_session()
    credentials = session.get_credentials()
    if credentials is None:
        raise ServerError(
            "no AWS credentials to sign requests to the API with: set AWS_PROFILE or AWS_ACCESS_KEY_ID, "
            "or pass --api-key for a stack deployed with api_auth=api_key"
        )
    region = api_region(api_url) or session.get_config_variable("region")
    if not region:
        raise ServerError(f"cannot tell the API's region from {api_url}: set AWS_DEFAULT_REGION")

    def sign(method: str, url: str, headers: dict[str, str], body: bytes | None) -> dict[str, str]:
        request = AWSRequest(method=method, url=url, data=body or b"", headers=headers)
        # Frozen per request: refreshable credentials (SSO, a role) may change between requests.
        SigV4Auth(credentials.get_frozen_credentials(), SIGNING_SERVICE, region).add_auth(request)
        return {name: value for name, value in request.headers.items() if name.lower() in _SIGNATURE_HEADERS}

    return sign


def api_region(api_url: str) -> str | None:
    """The region in an `execute-api` URL; None for another host (a custom domain, the local server)."""
    match = _EXECUTE_API_HOST.fullmatch(urllib.parse.urlsplit(api_url).hostname or "")
    return match.group(1) if match else None


# Tries of a request that may be sent again, and the first pause between them (then doubled).
ATTEMPTS = 3
RETRY_SECONDS = 0.5


class RemoteSession:
    """The `Session` of a deployed API (`infra/cli/session.py`).

    No server to start or find again: `reconnect` and `close` have nothing to do, and there is
    no health route to ask which model the stack calls.
    """

    started_server = False

    def __init__(self, api_url: str, api_key: str | None = None) -> None:
        auth = api_key_auth(api_key) if api_key else sigv4_auth(api_url)
        self._client = Client.for_api(api_url, auth)
        self.url = api_url

    def health(self) -> dict[str, Any]:
        return {"model_endpoint": f"the deployed stack's (-c model_base_url), through {self.url}"}

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        # A read, or a write with an Idempotency-Key (the API answers a repeat with what the
        # first did), is asked again when its answer was lost; any other write only once.
        attempts = ATTEMPTS if method == "GET" or IDEMPOTENCY_KEY in (headers or {}) else 1
        for attempt in range(attempts):
            try:
                return self._client.request(method, path, body, headers)
            except ServerError:
                if attempt == attempts - 1:
                    raise
                time.sleep(RETRY_SECONDS * 2**attempt)
        raise AssertionError("unreachable")

    def events(self, run_id: str, *, after: int, timeout: float) -> Iterator[tuple[str, Any]]:
        return self._client.events(run_id, after=after, timeout=timeout)

    def reconnect(self) -> None:
        pass  # nothing to find again: the same URL

    def close(self) -> None:
        pass
