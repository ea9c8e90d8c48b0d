"""The approval page's routes: for whoever holds the signed link (README "The approval link").

The signature is the credential: no caller identity is read. The page's own flow and statuses
are `ApprovalPage`'s; this module reads the request from the event and writes the answer, its
CSRF cookie included.
"""

import base64
import re
import urllib.parse
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.shared.cookies import Cookie, SameSite
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

from toolpipe.functions.api.identity import api_url, request_context
from toolpipe.functions.api.openapi import error_responses, html_responses
from toolpipe.functions.api.page import views
from toolpipe.functions.api.page.approval_page import CSRF_COOKIE, PageAnswer, PageRequest, csrf_cookie
from toolpipe.functions.api.services import services_of

router = Router()  # type: ignore[no-untyped-call]  # Powertools leaves its __init__ unannotated

# The edit form's arguments (64 KiB) URL-encoded, with room to spare; larger forms are refused.
MAX_FORM_BYTES = 512 * 1024
PAGE_ROUTE = re.compile(r"/approvals/[^/]+/page")
# What the page can answer, by status (POST only: 409).
PAGE_ANSWERS = {
    200: "The page: the call and its forms, or who decided it (GET, HEAD); the decision (POST).",
    400: "A form that cannot be taken (a blank reason, arguments that fail the tool's checks): "
    "the page again with the error; nothing decided.",
    403: "A link that is not valid, a missing or foreign CSRF token, another site's form; (POST) "
    "edited arguments where link edits are off.",
    409: "Already decided (POST): the first decision stands.",
    410: "The link expired, or the run ended: the call no longer waits.",
    500: "Something went wrong: nothing was decided (a decision that could not be delivered was "
    "taken back); try again.",
    503: "The signing key cannot be read (nothing changed); or (POST) the run could not be "
    "told: the page says whether the decision is recorded, and offers to send it again.",
}
# API Gateway's own answer when the page's throttle is reached (infra/cdk/constructs/api.py).
THROTTLED = error_responses(429)
# Powertools writes an operation's `security` only when it is not empty: given here as is, it
# says the link's signature is the credential (no IAM signature or API key).
NO_SECURITY: dict[str, Any] = {"security": []}


def page_request(event: BaseProxyEvent, approval_id: str, form: dict[str, str] | None = None) -> PageRequest:
    """The page request as the event carries it. Who decided is recorded as the link, from the
    request's source address."""
    query = event.query_string_parameters or {}
    form = form or {}
    context = request_context(event)
    identity = context.get("identity")
    source_ip = identity.get("sourceIp") if isinstance(identity, dict) else None
    return PageRequest(
        approval_id=approval_id,
        exp=form.get("exp") or query.get("exp"),
        sig=form.get("sig") or query.get("sig"),
        kid=form.get("kid") or query.get("kid"),
        cookie=csrf_cookie(event.headers.get("cookie")),
        source_ip=source_ip if isinstance(source_ip, str) else None,
        origin=event.headers.get("origin"),
        host=event.headers.get("host") or context.get("domainName"),
        form=form,
    )


def page_response(event: BaseProxyEvent, answer: PageAnswer) -> Response[str]:
    cookies = []
    if answer.set_cookie is not None:
        # The page's own path as the browser sees it (the stage included): the cookie goes
        # nowhere else.
        path = request_context(event).get("path")
        cookies.append(
            Cookie(
                name=CSRF_COOKIE,
                value=answer.set_cookie,
                path=str(path or event.path),
                secure=api_url(event).startswith("https://"),
                http_only=True,
                same_site=SameSite.STRICT_MODE,
            )
        )
    return Response(
        status_code=answer.status,
        content_type="text/html; charset=utf-8",
        body=answer.html,
        headers=dict(answer.headers),
        cookies=cookies,
    )


# GET and HEAD: one page, an operation each (an operation id names one method).
SHOW_PAGE: dict[str, Any] = {
    "summary": "The approval page (HTML) behind the signed link: shows the call, never decides",
    "description": "Query: `exp`, `kid` and `sig` from the link. No IAM signature or API key: the "
    "signature is the credential. 403 for a link that is not valid, 410 once expired. Sets the CSRF "
    "cookie the page's forms need.",
    "responses": html_responses({code: text for code, text in PAGE_ANSWERS.items() if code != 409})
    | THROTTLED,
    "openapi_extensions": NO_SECURITY,
    "tags": ["pages"],
}


@router.route("/approvals/<approval_id>/page", method="GET", operation_id="getApprovalPage", **SHOW_PAGE)
@router.route("/approvals/<approval_id>/page", method="HEAD", operation_id="headApprovalPage", **SHOW_PAGE)
def approval_page(approval_id: str) -> Response[str]:
    event = router.current_event
    return page_response(event, services_of(router).page.show(page_request(event, approval_id)))


@router.post(
    "/approvals/<approval_id>/page",
    operation_id="decideOnApprovalPage",
    tags=["pages"],
    summary="Decide from the approval page, or answer a question page (a form post)",
    description="Form-encoded: `action` (approve, deny or edit), `reason`, `arguments`, `csrf`, and "
    "the link's `exp`, `kid` and `sig` (`edit` only where the stack turned link edits on: else a 403); a human-input call's page posts `action` answer with `answer` (free "
    "text or JSON) or one `field.<property>` per property of its result schema. Needs the CSRF "
    "cookie the page set and a matching token; a foreign `Origin` is refused. 409 once decided.",
    responses=html_responses(PAGE_ANSWERS) | THROTTLED,
    openapi_extensions=NO_SECURITY,
)
def decide_on_page(approval_id: str) -> Response[str]:
    event = router.current_event
    raw = event.body or ""
    if len(raw) > MAX_FORM_BYTES:
        return page_response(event, PageAnswer(413, views.render("too_large.html")))
    text = base64.b64decode(raw).decode("utf-8", "replace") if event.is_base64_encoded else raw
    form = {k: v[0] for k, v in urllib.parse.parse_qs(text, keep_blank_values=True).items()}
    return page_response(event, services_of(router).page.submit(page_request(event, approval_id, form)))
