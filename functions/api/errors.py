"""Domain errors as HTTP answers, once for every route (the handler registers these with
`app.exception_handler`).

A domain error's message is the answer's, in one line; a system error (AWS unavailable, a bug)
is logged whole and answered in one line with the request's id, never a traceback.
"""

from http import HTTPStatus
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import ServiceError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from toolpipe.functions.api.identity import request_id
from toolpipe.functions.api.page.approval_page import error_page
from toolpipe.functions.api.page.routes import PAGE_ROUTE, page_response
from toolpipe.functions.api.request import PARAMETER_RULES
from toolpipe.shared.agents.errors import UnknownAgentError
from toolpipe.shared.deferred.models import (
    ApprovalStatus,
    DeliveryFailedError,
    DeliveryUncertainError,
    InvalidAnswerError,
    InvalidEditError,
)
from toolpipe.shared.errors import ConflictError, NotFoundError
from toolpipe.shared.history.errors import InvalidCursorError, QuotaExceededError
from toolpipe.shared.runs.errors import IdempotencyConflictError, UnknownToolsRequestedError
from toolpipe.shared.tools import ToolSourceError

logger = Logger()

# Each domain error's status, and how its message is worded (`{}`: the error's own).
# A family's base answers for all its errors (`domain_error` reads the error's classes in order).
STATUSES: dict[type[Exception], tuple[HTTPStatus, str]] = {
    NotFoundError: (HTTPStatus.NOT_FOUND, "{}"),
    ConflictError: (HTTPStatus.CONFLICT, "{}"),
    UnknownAgentError: (HTTPStatus.BAD_REQUEST, "{}"),
    UnknownToolsRequestedError: (HTTPStatus.BAD_REQUEST, "{}"),
    ToolSourceError: (HTTPStatus.BAD_REQUEST, "{}"),
    InvalidAnswerError: (HTTPStatus.BAD_REQUEST, "{}"),
    # Only `POST /approvals/{id}/approve` takes arguments (the page answers its own).
    InvalidEditError: (HTTPStatus.BAD_REQUEST, "invalid approve request: body.arguments: {}"),
    InvalidCursorError: (HTTPStatus.BAD_REQUEST, "invalid request: query.{}"),
    DeliveryFailedError: (HTTPStatus.SERVICE_UNAVAILABLE, "{}"),
    DeliveryUncertainError: (HTTPStatus.SERVICE_UNAVAILABLE, "{}"),
}
# Idempotency keys from the API, in a namespace of their own: a client cannot name the key a
# trigger gives its runs (`eventbridge:<id>`).
API_KEY_PREFIX = "api:"


def error_response(status: HTTPStatus, message: str, headers: dict[str, str] | None = None) -> Response[Any]:
    """The JSON error body every route answers with, as Powertools' own `ServiceError` does."""
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        headers=headers,
        body={"statusCode": status, "message": message},
    )


def domain_error(error: Exception) -> Response[Any]:
    status, wording = next(STATUSES[cls] for cls in type(error).__mro__ if cls in STATUSES)
    return error_response(status, wording.format(error))


def idempotency_conflict(error: IdempotencyConflictError) -> Response[Any]:
    key = error.key.removeprefix(API_KEY_PREFIX)
    message = f"Idempotency-Key {key!r} already {error.did} run {error.run_id} with a different request"
    return error_response(HTTPStatus.CONFLICT, message)


def quota_exceeded(error: QuotaExceededError) -> Response[Any]:
    logger.info("run refused", quota=error.quota, limit=error.limit)
    return error_response(HTTPStatus.TOO_MANY_REQUESTS, str(error), {"Retry-After": str(error.retry_after)})


def bad_parameters(app: APIGatewayRestResolver, error: RequestValidationError) -> Response[Any]:
    # 400, not Powertools' 422: a bad path or query parameter is answered like a bad body.
    rules = PARAMETER_RULES
    if app.current_event.path.startswith("/approvals"):
        rules = rules | {"status": f"status is one of {', '.join(s.value for s in ApprovalStatus)}"}
    details = "; ".join(
        f"{'.'.join(str(p) for p in e['loc'])}: {rules.get(str(e['loc'][-1]), e.get('msg', e['type']))}"
        for e in error.errors()
    )
    return error_response(HTTPStatus.BAD_REQUEST, f"invalid request: {details}")


def unexpected(app: APIGatewayRestResolver, error: Exception) -> Response[Any]:
    if isinstance(error, ServiceError):
        raise error  # a 4xx raised on purpose: Powertools answers it
    # A system error (AWS unavailable, a bug): logged whole, answered in one line.
    logger.exception("request failed")
    event = app.current_event
    if PAGE_ROUTE.fullmatch(event.path):
        # A person in a browser: a page, not JSON. A decision that could not be delivered was
        # taken back (DeferredCalls), so trying again is safe.
        message = f"Nothing was decided (request {request_id(event)}): try again."
        return page_response(event, error_page(500, "Something went wrong", message))
    return error_response(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error (request {request_id(event)})")
