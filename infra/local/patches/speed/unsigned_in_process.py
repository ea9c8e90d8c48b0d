"""Requests moto serves in-process are not signed.

botocore: each request is signed with SigV4 (a canonical request, then four HMACs: a sixth of
a local request's time), and moto, serving it in-process, does not check the signature.

Why it matters: it is paid by every request of the runtime.

The patch: while moto is on, a client's request to an AWS host moto serves gets the same
headers with the signature left out; moto still reads the access key and region from the
`Authorization` credential. Everything else is signed as ever: presigned URLs, requests signed
by hand (`toolpipe --api`), requests moto passes through (a tool's client for an S3-compatible
store, say, or a passthrough moto is configured with), and every request while moto's IAM access
control checks signatures.

It is process-wide (botocore's signer class): the clients of the user's own tools, under
`toolpipe serve`, skip the signature too, for the requests moto answers without checking it
(README, "The local runtime").
"""

import math
from typing import Any

import botocore.auth
import botocore.exceptions
import botocore.utils
from moto import backend_index
from moto import settings as moto_settings
from moto.core import config as moto_config
from moto.core.models import botocore_stubber
from moto.core.utils import get_equivalent_url_in_aws_domain

CHECKED_WITH = ("5.2.5",)

_add_auth = botocore.auth.SigV4Auth.add_auth
_hosts_moto_serves: dict[str, bool] = {}


def _served_in_process(url: str) -> bool:
    """Whether moto answers this request itself, without checking its signature: a URL one of
    its backends serves (as its stubber decides), not one it is told to pass through, with its
    IAM access control off (on, it checks signatures)."""
    if math.inf > moto_settings.INITIAL_NO_AUTH_ACTION_COUNT:
        return False
    parsed, _ = get_equivalent_url_in_aws_domain(url)  # as the stubber reads it
    clean_url = f"{parsed.scheme}://{parsed.netloc}{parsed.path}"
    passthrough = moto_config.default_user_config.get("core", {}).get("passthrough", {})
    if passthrough.get("services") or moto_config.passthrough_url(clean_url):
        return False
    host = f"{parsed.scheme}://{parsed.netloc}"
    served = _hosts_moto_serves.get(host)
    if served is None:
        # Backends are found by host (the patterns end there): the first URL decides for its host.
        # Not one of them (another endpoint, or an AWS service moto lacks): sent over HTTP.
        served = _hosts_moto_serves[host] = any(
            pattern.match(clean_url) for _, pattern in backend_index.backend_url_patterns
        )
    return served


def _add_auth_unless_served_in_process(self: botocore.auth.SigV4Auth, request: Any) -> None:
    if (
        not botocore_stubber.enabled
        or isinstance(self, botocore.auth.SigV4QueryAuth)  # a presigned URL leaves the process
        or "client_region" not in request.context  # not a client's request: signed by hand, to send
        or not _served_in_process(request.url)
    ):
        return _add_auth(self, request)
    if self.credentials is None:
        raise botocore.exceptions.NoCredentialsError()
    now = botocore.utils.get_current_datetime()  # type: ignore[attr-defined]  # the signer's clock (not in the stubs)
    request.context["timestamp"] = now.strftime(botocore.auth.SIGV4_TIMESTAMP)
    # The date, token and payload hash headers, as the signer sets them (not in botocore's stubs).
    self._modify_request_before_signing(request)  # type: ignore[attr-defined]
    request.headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={self.scope(request)}, SignedHeaders=host, Signature=in-process"
    )
    return None


def install() -> None:
    botocore.auth.SigV4Auth.add_auth = _add_auth_unless_served_in_process  # type: ignore[method-assign]
