"""Who calls, and the URL they called: read from the request as API Gateway reports it.

Who calls is the request's identity (IAM: the signer's ARN), never a body field. The URL is
the one the caller reached, so that links the API gives (a run's `status_url`, an approval's
signed link) work from where they were asked for.
"""

from typing import Any

from aws_lambda_powertools.event_handler.exceptions import BadRequestError, ForbiddenError
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

from toolpipe.shared.dynamo import MAX_CALLER_BYTES, caller_fits
from toolpipe.shared.owners import owner_of

# A caller identity (the request's, or an owner the admin names) is written into the keys of the
# caller index: what every one of them can hold (shared/dynamo.py).
CALLER_RULE = f"is at most {MAX_CALLER_BYTES:,} bytes of UTF-8"


def request_context(event: BaseProxyEvent) -> dict[str, Any]:
    """The event's `requestContext`, or an empty one: a hostile event may carry anything."""
    context = event.raw_event.get("requestContext")
    return context if isinstance(context, dict) else {}


def signer(context: Any) -> str | None:
    """The authenticated identity as API Gateway reports it: the IAM signer's ARN (IAM
    authorization; a role's session ARN for a role), else a Lambda authorizer's principal id,
    else the API key's id. None when the request carries none."""
    if not isinstance(context, dict):
        return None
    identity = context.get("identity") or {}
    authorizer = context.get("authorizer") or {}
    for value, prefix in (
        (identity.get("userArn") if isinstance(identity, dict) else None, ""),
        (authorizer.get("principalId") if isinstance(authorizer, dict) else None, ""),
        # Prefixed: a key id must never equal a principal's name.
        (identity.get("apiKeyId") if isinstance(identity, dict) else None, "api-key:"),
    ):
        if isinstance(value, str) and value:
            return prefix + value
    return None


def caller_identity(context: Any) -> str | None:
    """The caller that owns runs: the signer, a role's session as its role (shared/owners.py),
    so every session of one role reads the same runs. None when the request carries none."""
    found = signer(context)
    return None if found is None else owner_of(found)


def current_caller(event: BaseProxyEvent) -> str:
    """The request's caller; a 403 without one, a 400 for one no key can hold."""
    caller = caller_identity(event.raw_event.get("requestContext"))
    if caller is None:
        raise ForbiddenError("the request carries no caller identity: sign it with SigV4 (IAM authorization)")
    if not caller_fits(caller):
        # Refused before anything is written: a run or approval keyed on it could not be stored.
        raise BadRequestError(f"invalid request: the caller identity {CALLER_RULE}")
    return caller


def current_signer(event: BaseProxyEvent) -> str:
    """Who made this request, for the record of a decision or a cancel: the session, where the
    caller (the owner) is its role. Call after `current_caller`, which refuses a request without."""
    return signer(event.raw_event.get("requestContext")) or current_caller(event)


def api_url(event: BaseProxyEvent) -> str:
    """The API's absolute base URL, as the caller reached it: API Gateway's domain name and
    stage on AWS; the Host header where there is no domain name (the local server)."""
    context = request_context(event)
    domain = context.get("domainName")
    host = domain or event.headers.get("host")
    stage = context.get("stage")
    if not host:
        return ""  # no way to know: links stay relative
    scheme = event.headers.get("x-forwarded-proto") or ("https" if domain else "http")
    return f"{scheme}://{host}" + (f"/{stage}" if stage else "")


def status_url(event: BaseProxyEvent, run_id: str) -> str:
    return f"{api_url(event)}/runs/{run_id}"


def request_id(event: BaseProxyEvent) -> Any:
    """API Gateway's id of the request, to find it in the logs."""
    return request_context(event).get("requestId")
