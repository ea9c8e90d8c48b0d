"""REST API: start, list, inspect, cancel and delete runs; list and decide approvals; its OpenAPI
document. GET never changes state.

Who calls is the request's identity as API Gateway reports it (IAM: the signer's ARN), never
a body field. Every bad input is a 400 naming the field (`invalid request: path.seq: ...`),
bodies included; a run that is not the caller's is a 404, like an unknown one.
"""

import base64
import binascii
import copy
import json
import re
import urllib.parse
from functools import cache
from http import HTTPStatus
from typing import Annotated, Any, TypeVar
from zoneinfo import available_timezones

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import (
    BadRequestError,
    ForbiddenError,
    NotFoundError,
    ServiceError,
)
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.shared.cookies import Cookie, SameSite
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.config import Config
from pydantic import BaseModel, ValidationError

from toolpipe.shared.agents import all_agents
from toolpipe.shared.approvals.models import (
    APPROVAL_ID_PATTERN,
    AnswerRequest,
    Approval,
    ApprovalAlreadyDecidedError,
    ApprovalDecided,
    ApprovalList,
    ApprovalNotFoundError,
    ApprovalStatus,
    ApproveRequest,
    CallAnswered,
    DeliveryFailedError,
    DeliveryUncertainError,
    DenyRequest,
    InvalidAnswerError,
    InvalidEditError,
    ResultRequest,
    WrongKindError,
)
from toolpipe.shared.approvals.page import (
    CSRF_COOKIE,
    ApprovalPage,
    PageAnswer,
    PageRequest,
    csrf_cookie,
    error_page,
)
from toolpipe.shared.approvals.service import ApprovalService
from toolpipe.shared.dynamo import MAX_CALLER_BYTES, caller_fits
from toolpipe.shared.errors import (
    IdempotencyConflictError,
    InvalidCursorError,
    QuotaExceededError,
    RunEndedError,
    RunNotFoundError,
    RunStillRunningError,
    UnknownAgentError,
    UnknownToolsRequestedError,
    describe_validation_error,
)
from toolpipe.shared.messages import (
    IDEMPOTENCY_KEY_PATTERN,
    NAME_PATTERN,
    TIMEZONE_PATTERN,
    RunStatus,
    StartRunRequest,
)
from toolpipe.shared.owners import owner_of
from toolpipe.shared.runs.cancel import RunCanceller
from toolpipe.shared.runs.delete import RunDeleter
from toolpipe.shared.runs.factory import (
    build_approval_service,
    build_run_canceller,
    build_run_deleter,
    build_run_starter,
    build_store,
)
from toolpipe.shared.runs.quota import RUNNING_RETRY_AFTER_SECONDS, WINDOW_SECONDS
from toolpipe.shared.runs.report import (
    MAX_TOKEN_CHARS,
    PAGE_LIMIT,
    RUNS_PAGE_DEFAULT,
    TOKEN_PATTERN,
    URL_SECONDS,
    RunReader,
)
from toolpipe.shared.runs.starter import RunStarter
from toolpipe.shared.runs.views import ErrorBody, MessagesPage, RunCancelled, RunDetail, RunList, RunStarted
from toolpipe.shared.settings import (
    ApiSettings,
    ApprovalLinkSettings,
    CallTimeouts,
    EventSettings,
    QuotaSettings,
    StateMachineSettings,
    StoreSettings,
)
from toolpipe.shared.tools import ToolSourceError
from toolpipe.shared.tracing import trace_handler

logger = Logger()
# Validation of path and query parameters; its errors are answered as 400 below, like bodies.
app = APIGatewayRestResolver(enable_validation=True)
store_settings = StoreSettings.from_env()
machine_settings = StateMachineSettings.from_env()
api_settings = ApiSettings.from_env()
event_settings = EventSettings.from_env()
link_settings = ApprovalLinkSettings.from_env()
quota_settings = QuotaSettings.from_env()

# A caller identity (the request's, or an owner the admin names) is written into the keys of the
# caller index: what every one of them can hold (shared/history/store.py).
CALLER_RULE = f"is at most {MAX_CALLER_BYTES:,} bytes of UTF-8"
RUN_ID = r"^[A-Za-z0-9_-]{1,64}$"
SEQ = r"^[0-9]{1,6}$"  # [0-9], not \d: \d also matches digits such as "²" or "٣"
LIMIT = r"^[0-9]{1,3}$"
# The prompt is at most 100,000 characters; a body many times that is refused before parsing.
MAX_BODY_CHARS = 1_000_000
# What each parameter must look like, in the words a 400 uses.
PARAMETER_RULES = {
    "run_id": "a run id is 1 to 64 letters, digits, '_' or '-'",
    "seq": "a message number is 1 to 6 digits",
    "after": "after is a message number: 1 to 6 digits",
    "executions_after": "executions_after is a message number: 1 to 6 digits",
    "limit": f"limit is a number from 1 to {PAGE_LIMIT}",
    "status": f"status is one of {', '.join(s.value for s in RunStatus)}",
    "agent": "an agent name is 1 to 64 letters, digits, '_' or '-'",
    "caller": f"caller is a principal's ARN (or `*`), {CALLER_RULE}",
    "next": "next is the token the previous page gave",
    "approval_id": "an approval id is 32 hex digits",
    "call_id": "a call id is the call's slot (the event's `slot`): 1 to 6 digits",
}

RunId = Annotated[str, Path(pattern=RUN_ID)]
IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
PAGE_ROUTE = re.compile(r"/approvals/[^/]+/page")


@cache
def starter() -> RunStarter:
    return build_run_starter(store_settings, machine_settings, event_settings, quota_settings)


@cache
def canceller() -> RunCanceller:
    return build_run_canceller(store_settings, machine_settings, event_settings, api_settings.admin_principal)


@cache
def deleter() -> RunDeleter:
    return build_run_deleter(store_settings, api_settings.admin_principal)


@cache
def reader() -> RunReader:
    # SigV4 signs URLs that work in every region and with the function's session credentials.
    s3 = boto3.client("s3", config=Config(signature_version="s3v4"))

    def presign(key: str) -> str:
        return str(
            s3.generate_presigned_url(
                "get_object", Params={"Bucket": store_settings.bucket_name, "Key": key}, ExpiresIn=URL_SECONDS
            )
        )

    return RunReader(build_store(store_settings), presign, api_settings.admin_principal)


def signer(request_context: Any) -> str | None:
    """The authenticated identity as API Gateway reports it: the IAM signer's ARN (IAM
    authorization; a role's session ARN for a role), else a Lambda authorizer's principal id,
    else the API key's id. None when the request carries none."""
    if not isinstance(request_context, dict):
        return None
    identity = request_context.get("identity") or {}
    authorizer = request_context.get("authorizer") or {}
    for value, prefix in (
        (identity.get("userArn") if isinstance(identity, dict) else None, ""),
        (authorizer.get("principalId") if isinstance(authorizer, dict) else None, ""),
        # Prefixed: a key id must never equal a principal's name.
        (identity.get("apiKeyId") if isinstance(identity, dict) else None, "api-key:"),
    ):
        if isinstance(value, str) and value:
            return prefix + value
    return None


def caller_identity(request_context: Any) -> str | None:
    """The caller that owns runs: the signer, a role's session as its role (shared/owners.py),
    so every session of one role reads the same runs. None when the request carries none."""
    found = signer(request_context)
    return None if found is None else owner_of(found)


def current_caller() -> str:
    caller = caller_identity(app.current_event.raw_event.get("requestContext"))
    if caller is None:
        raise ForbiddenError("the request carries no caller identity: sign it with SigV4 (IAM authorization)")
    if not caller_fits(caller):
        # Refused before anything is written: a run or approval keyed on it could not be stored.
        raise BadRequestError(f"invalid request: the caller identity {CALLER_RULE}")
    return caller


def current_signer() -> str:
    """Who made this request, for the record of a decision or a cancel: the session, where the
    caller (the owner) is its role. Call after `current_caller`, which refuses a request without."""
    return signer(app.current_event.raw_event.get("requestContext")) or current_caller()


def api_url() -> str:
    """The API's absolute base URL, as the caller reached it: API Gateway's domain name and
    stage on AWS; the Host header where there is no domain name (the local server)."""
    context = app.current_event.raw_event.get("requestContext") or {}
    headers = app.current_event.headers
    domain = context.get("domainName") if isinstance(context, dict) else None
    host = domain or headers.get("host")
    stage = context.get("stage") if isinstance(context, dict) else None
    if not host:
        return ""  # no way to know: links stay relative
    scheme = headers.get("x-forwarded-proto") or ("https" if domain else "http")
    return f"{scheme}://{host}" + (f"/{stage}" if stage else "")


def status_url(run_id: str) -> str:
    return f"{api_url()}/runs/{run_id}"


def documented(status: int, model: Any, description: str, *errors: int) -> dict[int, Any]:
    """OpenAPI responses of a route: its answer's model, and the error codes it can give."""
    reasons = {
        400: "A bad body, header or parameter: the message names the field. Also a caller identity "
        f"longer than any key can hold: it {CALLER_RULE}.",
        403: "The request carries no caller identity.",
        404: "No such run (or not the caller's).",
        409: "A conflict: the key started another request, the run already ended (cancel), or it is "
        "still running (delete).",
        429: "The caller is over a quota: runs started a minute (`Retry-After`: the seconds left in "
        f"the {WINDOW_SECONDS} s window) or runs running at once (`Retry-After`: "
        f"{RUNNING_RETRY_AFTER_SECONDS} s). Nothing was started.",
        503: "The run could not be told: the message says whether the decision is recorded (the "
        "same request again delivers it) or not (nothing changed; send it again).",
    }
    error = {"application/json": {"model": ErrorBody}}
    return {status: {"description": description, "content": {"application/json": {"model": model}}}} | {
        code: {"description": reasons[code], "content": error} for code in errors
    }


Body = TypeVar("Body", bound=BaseModel)


def parsed_body(model: type[Body], what: str, empty: str = "{}") -> Body:
    """The request body as `model` (an empty body as `empty`); a 400 naming `what` otherwise."""
    try:
        return model.model_validate_json(request_body() or empty)
    except ValidationError as e:
        raise BadRequestError(f"invalid {what} request: {describe_validation_error(e, 'body')}") from e


def request_body() -> str | bytes:
    """The raw body, bounded and base64-decoded when API Gateway encoded it."""
    body = app.current_event.body or ""
    if len(body) > MAX_BODY_CHARS:
        raise BadRequestError(f"invalid run request: body: larger than {MAX_BODY_CHARS:,} characters")
    if not app.current_event.is_base64_encoded:
        return body
    try:
        return base64.b64decode(body, validate=True)  # invalid UTF-8 inside is the parser's to refuse
    except binascii.Error as e:
        raise BadRequestError("invalid run request: body: not valid base64") from e


def bad_parameters(error: RequestValidationError) -> Response[dict[str, Any]]:
    # 400, not Powertools' 422: a bad path or query parameter is answered like a bad body.
    rules = PARAMETER_RULES
    if app.current_event.path.startswith("/approvals"):
        rules = rules | {"status": f"status is one of {', '.join(s.value for s in ApprovalStatus)}"}
    details = "; ".join(
        f"{'.'.join(str(p) for p in e['loc'])}: {rules.get(str(e['loc'][-1]), e.get('msg', e['type']))}"
        for e in error.errors()
    )
    return Response(
        status_code=HTTPStatus.BAD_REQUEST,
        content_type=content_types.APPLICATION_JSON,
        body={"statusCode": HTTPStatus.BAD_REQUEST, "message": f"invalid request: {details}"},
    )


def unexpected(error: Exception) -> Response[Any]:
    if isinstance(error, ServiceError):
        raise error  # a 4xx raised on purpose: Powertools answers it
    # A system error (AWS unavailable, a bug): logged whole, answered in one line.
    logger.exception("request failed")
    context = app.current_event.raw_event.get("requestContext")
    request_id = context.get("requestId") if isinstance(context, dict) else None
    if PAGE_ROUTE.fullmatch(app.current_event.path):
        # A person in a browser: a page, not JSON. A decision that could not be delivered was
        # taken back (ApprovalService), so trying again is safe.
        return page_response(
            error_page(500, "Something went wrong", f"Nothing was decided (request {request_id}): try again.")
        )
    return Response(
        status_code=HTTPStatus.INTERNAL_SERVER_ERROR,
        content_type=content_types.APPLICATION_JSON,
        body={
            "statusCode": HTTPStatus.INTERNAL_SERVER_ERROR,
            "message": f"internal error (request {request_id})",
        },
    )


# Registered by call: the decorator is untyped.
app.exception_handler(RequestValidationError)(bad_parameters)
app.exception_handler(Exception)(unexpected)


@app.post(
    "/runs",
    summary="Start a run",
    description="Body: StartRunRequest. With an `Idempotency-Key` header, the same key and body "
    "start one run however often they are sent (a repeat is answered `Idempotent-Replayed: true`); "
    "the same key with another body is a 409.",
    responses=documented(202, RunStarted, "The run started.", 400, 403, 409, 429),
)
def start_run() -> Response[dict[str, Any]]:
    caller = current_caller()
    request = parsed_body(StartRunRequest, "run", empty="")
    if request.mcp_servers and not api_settings.allow_run_mcp_servers:
        raise BadRequestError("mcp_servers is not enabled here (TOOLPIPE_ALLOW_RUN_MCP_SERVERS)")
    key = app.current_event.headers.get("idempotency-key")  # Powertools matches any case
    if key is not None:
        key = key.strip(" \t")  # HTTP drops a field value's surrounding whitespace (RFC 9110 5.5)
    if key is not None and not IDEMPOTENCY_KEY.match(key):
        raise BadRequestError(
            "invalid request: header.Idempotency-Key: 1 to 255 printable characters, no spaces"
        )
    try:
        # Its own namespace: a client cannot name the key a trigger gives its runs (`eventbridge:<id>`).
        record, replayed = starter().start(
            request, caller, idempotency_key=None if key is None else f"api:{key}"
        )
    except (UnknownAgentError, UnknownToolsRequestedError, ToolSourceError) as e:
        raise BadRequestError(str(e)) from e
    except IdempotencyConflictError as e:
        message = f"Idempotency-Key {key!r} already started run {e.run_id} with a different request"
        raise ServiceError(HTTPStatus.CONFLICT, message) from e
    except QuotaExceededError as e:
        logger.info("run refused", quota=e.quota, limit=e.limit)
        return Response(
            status_code=HTTPStatus.TOO_MANY_REQUESTS,
            content_type=content_types.APPLICATION_JSON,
            headers={"Retry-After": str(e.retry_after)},
            body={"statusCode": HTTPStatus.TOO_MANY_REQUESTS, "message": str(e)},
        )
    logger.info("run started", run_id=record.run_id, agent=record.agent, replayed=replayed)
    return Response(
        status_code=HTTPStatus.ACCEPTED,
        content_type=content_types.APPLICATION_JSON,
        # A retry gets the first answer again, marked as Stripe marks it.
        headers={"Idempotent-Replayed": "true"} if replayed else None,
        body=RunStarted(
            run_id=record.run_id,
            status=record.status,
            status_url=status_url(record.run_id),
            links={"self": f"/runs/{record.run_id}", "messages": f"/runs/{record.run_id}/messages"},
        ).model_dump(mode="json"),
    )


@app.get(
    "/runs",
    summary="List runs, newest first",
    description="The caller's runs; the admin principal may name another `caller`, or `caller=*` "
    "for every run (a scan: in no set order). A page may hold fewer than `limit` runs when a "
    "filter is set: follow `next` until it is null.",
    responses=documented(200, RunList, "A page of runs.", 400, 403),
)
def list_runs(
    status: Annotated[RunStatus | None, Query()] = None,
    agent: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
    # Characters here; the bytes below (a character is 1 to 4 bytes of UTF-8).
    caller: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_CALLER_BYTES,
            description=f"The admin principal only: another caller's runs, or `*` for every run. It {CALLER_RULE}.",
        ),
    ] = None,
    limit: Annotated[str, Query(pattern=LIMIT)] = str(RUNS_PAGE_DEFAULT),
    next: Annotated[
        str | None,
        Query(
            pattern=TOKEN_PATTERN,
            max_length=MAX_TOKEN_CHARS,
            description="The `next` of the previous page, as is.",
        ),
    ] = None,  # the name the API uses
) -> dict[str, Any]:
    if not 1 <= int(limit) <= PAGE_LIMIT:
        raise BadRequestError(f"invalid request: query.limit: {PARAMETER_RULES['limit']}")
    if caller is not None and caller != "*" and not caller_fits(caller):
        raise BadRequestError(f"invalid request: query.caller: {PARAMETER_RULES['caller']}")
    try:
        return reader().list_runs(
            current_caller(),
            owner=None if caller == "*" else caller,
            every=caller == "*",
            status=status,
            agent=agent,
            limit=int(limit),
            token=next,
        )
    except InvalidCursorError as e:
        raise BadRequestError(f"invalid request: query.{e}") from e
    except PermissionError as e:
        raise ForbiddenError(str(e)) from e


@app.get(
    "/runs/<run_id>",
    summary="A run: status, usage, answer (or its link), a page of its tool executions",
    responses=documented(200, RunDetail, "The run.", 400, 403, 404),
)
def get_run(run_id: RunId, executions_after: Annotated[str, Query(pattern=SEQ)] = "0") -> dict[str, Any]:
    """The run and a page of its tool executions (previews); `executions_next` reads on."""
    try:
        return reader().run(run_id, current_caller(), int(executions_after))
    except RunNotFoundError as e:
        raise NotFoundError(str(e)) from e


@app.get(
    "/runs/<run_id>/messages",
    summary="A page of the run's history, in order",
    responses=documented(200, MessagesPage, "History items after `after`.", 400, 403, 404),
)
def get_messages(
    run_id: RunId,
    after: Annotated[str, Query(pattern=SEQ)] = "0",
    limit: Annotated[str, Query(pattern=LIMIT)] = str(PAGE_LIMIT),
) -> dict[str, Any]:
    """The history, a page of previews at a time, after seq `after`; `next` reads on."""
    if not 1 <= int(limit) <= PAGE_LIMIT:
        raise BadRequestError(f"invalid request: query.limit: {PARAMETER_RULES['limit']}")
    try:
        return reader().messages(run_id, current_caller(), int(after), int(limit))
    except RunNotFoundError as e:
        raise NotFoundError(str(e)) from e


@app.get(
    "/runs/<run_id>/messages/<seq>",
    summary="One whole history item (a preview and a presigned `url` when over 5 MB)",
    responses=documented(200, dict[str, Any], "The history item.", 400, 403, 404),
)
def get_message(run_id: RunId, seq: Annotated[str, Path(pattern=SEQ)]) -> dict[str, Any]:
    """One whole history item, or a preview and a presigned `url` when it is too large."""
    try:
        item = reader().message(run_id, current_caller(), int(seq))
    except RunNotFoundError as e:
        raise NotFoundError(str(e)) from e
    if item is None:
        raise NotFoundError(f"run {run_id} has no message {int(seq)}")
    return item


@app.post(
    "/runs/<run_id>/cancel",
    summary="Cancel a run and its child runs",
    description="Stops the run's execution and those of its child runs (agent tools) and marks "
    "them `cancelled`. Cancelling a cancelled run answers the same again; a run that ended "
    "otherwise is a 409.",
    responses=documented(200, RunCancelled, "The run is cancelled.", 400, 403, 404, 409),
)
def cancel_run(run_id: RunId) -> dict[str, Any]:
    caller = current_caller()
    try:
        record, replayed = canceller().cancel(run_id, caller, by=current_signer())
    except RunNotFoundError as e:
        raise NotFoundError(str(e)) from e
    except RunEndedError as e:
        raise ServiceError(HTTPStatus.CONFLICT, str(e)) from e
    logger.info("run cancelled", run_id=run_id, replayed=replayed)
    return RunCancelled(run_id=record.run_id, status=record.status, status_url=status_url(run_id)).model_dump(
        mode="json"
    )


@app.delete(
    "/runs/<run_id>",
    summary="Delete an ended run now, with its child runs",
    description="Removes every item and stored object of the run and of its child runs (agent "
    "tools), before their retention runs out. A run, or a child run, still running is a 409: cancel "
    "it first. Deleting a deleted run is a 404.",
    responses=documented(204, None, "The run is deleted (no body).", 400, 403, 404, 409),
)
def delete_run(run_id: RunId) -> Response[None]:
    caller = current_caller()
    try:
        deleted = deleter().delete(run_id, caller)
    except RunNotFoundError as e:
        raise NotFoundError(str(e)) from e
    except RunStillRunningError as e:
        raise ServiceError(HTTPStatus.CONFLICT, str(e)) from e
    logger.info("run deleted", run_id=run_id, runs=len(deleted))
    return Response(status_code=HTTPStatus.NO_CONTENT, body=None)


# --- approvals: a person decides a call that waits (README "Human approval") ---------------

ApprovalId = Annotated[str, Path(pattern=APPROVAL_ID_PATTERN)]


@cache
def approvals() -> ApprovalService:
    return build_approval_service(
        store_settings, event_settings, CallTimeouts(), api_settings.admin_principal, link_settings
    )


def with_link(approval: Approval) -> dict[str, Any]:
    """An approval as its requester (or the admin) reads it: with its signed link, made under
    the URL this request came to."""
    url = approvals().callback_url(approval, api_url())
    return approval.model_copy(update={"callback_url": url}).model_dump(mode="json")


@app.get(
    "/approvals",
    summary="List approvals, newest first",
    description="The approvals of the caller's runs (the admin principal: everyone's), at most 100; "
    "`status=pending` for the calls still waiting.",
    responses=documented(200, ApprovalList, "The approvals.", 400, 403),
)
def list_approvals(status: Annotated[ApprovalStatus | None, Query()] = None) -> dict[str, Any]:
    listed = approvals().list(current_caller(), status)
    return {"approvals": [with_link(a) for a in listed]}


@app.get(
    "/approvals/<approval_id>",
    summary="One approval: the tool, a preview of its arguments, the run, the status",
    responses=documented(200, Approval, "The approval.", 400, 403, 404),
)
def get_approval(approval_id: ApprovalId) -> dict[str, Any]:
    try:
        return with_link(approvals().get(approval_id, current_caller()))
    except ApprovalNotFoundError as e:
        raise NotFoundError(str(e)) from e


def decide(
    approval_id: str, approve: bool, reason: str | None, arguments: str | None = None
) -> dict[str, Any]:
    caller = current_caller()
    try:
        decided = approvals().decide(approval_id, caller, approve, reason, arguments, by=current_signer())
    except ApprovalNotFoundError as e:
        raise NotFoundError(str(e)) from e
    except InvalidEditError as e:
        raise BadRequestError(f"invalid approve request: body.arguments: {e}") from e
    except (ApprovalAlreadyDecidedError, WrongKindError) as e:
        raise ServiceError(HTTPStatus.CONFLICT, str(e)) from e
    except (DeliveryFailedError, DeliveryUncertainError) as e:
        raise ServiceError(HTTPStatus.SERVICE_UNAVAILABLE, str(e)) from e
    logger.info(
        "approval decided", approval_id=approval_id, run_id=decided.run_id, status=decided.status.value
    )
    return ApprovalDecided(
        approval_id=approval_id, status="approved" if approve else "denied", run_id=decided.run_id
    ).model_dump(mode="json")


@app.post(
    "/approvals/<approval_id>/approve",
    summary="Approve a waiting call: it runs, with exactly the arguments shown (or yours)",
    description="Body (optional): ApproveRequest. With `arguments`, the call runs with those instead "
    "of the model's, once they pass the tool's validation (else a 400, nothing decided); the model "
    "is told, and the record keeps who edited them (`decided_by`, the signer). Only the run's caller or the admin principal may decide. The first decision wins; "
    "the same decision again is a retry (200; the waiting task is told again only while the first "
    "delivery is uncertain), another one a 409 that changes nothing.",
    responses=documented(
        200, ApprovalDecided, "The call was approved and is dispatched.", 400, 403, 404, 409, 503
    ),
)
def approve(approval_id: ApprovalId) -> dict[str, Any]:
    request = parsed_body(ApproveRequest, "approve")
    arguments = None if request.arguments is None else json.dumps(request.arguments, ensure_ascii=False)
    return decide(approval_id, True, None, arguments)


@app.post(
    "/approvals/<approval_id>/deny",
    summary="Deny a waiting call, with a reason the model reads",
    description="Body: DenyRequest. The call is never run; its result tells the model it was denied, "
    "and why. The first decision wins; the same denial again is a retry (200; the waiting task is "
    "told again only while the first delivery is uncertain), another reason or an approval a 409 "
    "that changes nothing.",
    responses=documented(200, ApprovalDecided, "The call was denied.", 400, 403, 404, 409, 503),
)
def deny(approval_id: ApprovalId) -> dict[str, Any]:
    request = parsed_body(DenyRequest, "deny")
    return decide(approval_id, False, request.reason)


# --- deferred calls: a person's answer, the caller's program's result ---------------------


def answered(resolve: Any) -> dict[str, Any]:
    """Run one answer through the service and map its refusals: 404 unknown (or not the
    caller's), 400 an answer that does not fit, 409 answered, expired or of another kind."""
    try:
        done = resolve()
    except ApprovalNotFoundError as e:
        raise NotFoundError(str(e)) from e
    except InvalidAnswerError as e:
        raise BadRequestError(str(e)) from e
    except (ApprovalAlreadyDecidedError, WrongKindError) as e:
        raise ServiceError(HTTPStatus.CONFLICT, str(e)) from e
    except (DeliveryFailedError, DeliveryUncertainError) as e:
        raise ServiceError(HTTPStatus.SERVICE_UNAVAILABLE, str(e)) from e
    logger.info("deferred call answered", approval_id=done.approval_id, run_id=done.run_id, seq=done.seq)
    return CallAnswered(
        approval_id=done.approval_id, status="answered", run_id=done.run_id, seq=done.seq
    ).model_dump(mode="json")


@app.post(
    "/approvals/<approval_id>/answer",
    summary="Answer a human-input call: the answer is the call's result",
    description="Body: AnswerRequest. Free text, or a JSON value matching the call's `result_schema`. "
    "Only the run's caller or the admin principal may answer. The first answer wins; any later one "
    "is a 409 and changes nothing.",
    responses=documented(200, CallAnswered, "The answer is the call's result.", 400, 403, 404, 409, 503),
)
def answer(approval_id: ApprovalId) -> dict[str, Any]:
    request = parsed_body(AnswerRequest, "answer")
    return answered(
        lambda: approvals().answer(approval_id, current_caller(), request.answer, by=current_signer())
    )


@app.post(
    "/runs/<run_id>/calls/<call_id>/result",
    summary="Post the result of a client-executed call",
    description='Body: ResultRequest, `{"result": ...}` or `{"error": "..."}`. `call_id` is the '
    "call's history slot (`slot` in `ToolCallRequested`). Only the run's caller or the admin "
    "principal may post. The first result wins; any later one is a 409 and changes nothing.",
    responses=documented(200, CallAnswered, "The result reached the call.", 400, 403, 404, 409, 503),
)
def post_result(run_id: RunId, call_id: Annotated[str, Path(pattern=SEQ)]) -> dict[str, Any]:
    request = parsed_body(ResultRequest, "result")
    return answered(
        lambda: approvals().post_result(run_id, int(call_id), current_caller(), request, by=current_signer())
    )


# --- the approval page: for whoever holds the signed link (README "The approval link") -------

# The edit form's arguments (64 KiB) URL-encoded, with room to spare; larger forms are refused.
MAX_FORM_BYTES = 512 * 1024


@cache
def page() -> ApprovalPage:
    return ApprovalPage(approvals())


def page_request(approval_id: str, form: dict[str, str] | None = None) -> PageRequest:
    """The page request as the event carries it. The signature is the credential: no caller
    identity is read. Who decided is recorded as the link, from the request's source address."""
    event = app.current_event
    query = event.query_string_parameters or {}
    form = form or {}
    context = event.raw_event.get("requestContext") or {}
    identity = context.get("identity") if isinstance(context, dict) else None
    source_ip = identity.get("sourceIp") if isinstance(identity, dict) else None
    host = event.headers.get("host") or (context.get("domainName") if isinstance(context, dict) else None)
    return PageRequest(
        approval_id=approval_id,
        exp=form.get("exp") or query.get("exp"),
        sig=form.get("sig") or query.get("sig"),
        kid=form.get("kid") or query.get("kid"),
        cookie=csrf_cookie(event.headers.get("cookie")),
        source_ip=source_ip if isinstance(source_ip, str) else None,
        origin=event.headers.get("origin"),
        host=host,
        form=form,
    )


def page_response(answer: PageAnswer) -> Response[str]:
    cookies = []
    if answer.set_cookie is not None:
        context = app.current_event.raw_event.get("requestContext") or {}
        # The page's own path as the browser sees it (the stage included): the cookie goes
        # nowhere else.
        path = context.get("path") if isinstance(context, dict) else None
        cookies.append(
            Cookie(
                name=CSRF_COOKIE,
                value=answer.set_cookie,
                path=str(path or app.current_event.path),
                secure=api_url().startswith("https://"),
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


@app.route(
    "/approvals/<approval_id>/page",
    method=["GET", "HEAD"],
    summary="The approval page (HTML) behind the signed link: shows the call, never decides",
    description="Query: `exp`, `kid` and `sig` from the link. No IAM signature or API key: the signature "
    "is the credential. 403 for a link that is not valid, 410 once expired. Sets the CSRF cookie the "
    "page's forms need.",
)
def approval_page(approval_id: str) -> Response[str]:
    return page_response(page().show(page_request(approval_id)))


@app.post(
    "/approvals/<approval_id>/page",
    summary="Decide from the approval page, or answer a question page (a form post)",
    description="Form-encoded: `action` (approve, deny or edit), `reason`, `arguments`, `csrf`, and "
    "the link's `exp`, `kid` and `sig` (`edit` only where the stack turned link edits on: else a 403); a human-input call's page posts `action` answer with `answer` (free "
    "text or JSON) or one `field.<property>` per property of its result schema. Needs the CSRF "
    "cookie the page set and a matching token; a foreign `Origin` is refused. 409 once decided.",
)
def decide_on_page(approval_id: str) -> Response[str]:
    raw = app.current_event.body or ""
    if len(raw) > MAX_FORM_BYTES:
        return page_response(
            PageAnswer(413, "<!doctype html><title>Too large</title><h1>Form too large</h1>")
        )
    text = base64.b64decode(raw).decode("utf-8", "replace") if app.current_event.is_base64_encoded else raw
    form = {k: v[0] for k, v in urllib.parse.parse_qs(text, keep_blank_values=True).items()}
    return page_response(page().submit(page_request(approval_id, form)))


OPENAPI_TITLE = "toolpipe runs API"


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of this API, generated from the routes above. `POST /runs` reads
    its body itself (to bound it and word every error), so its request body is added here
    from the same `StartRunRequest` model that parses it."""
    document: dict[str, Any] = json.loads(
        app.get_openapi_json_schema(
            title=OPENAPI_TITLE,
            version="1",
            description="LLM tool calling as a durable serverless pipeline. IAM (SigV4) authorized; "
            "the caller is the signer, a role's session as its role `arn:aws:iam::ACCOUNT:role/NAME` "
            "(or a Lambda authorizer's principalId, or `api-key:` and the API key's id). A caller identity "
            f"{CALLER_RULE}: a longer one is answered 400.",
        )
    )
    # Bad parameters are answered 400 (`bad_parameters`), never Powertools' 422.
    for operation in (o for path in document["paths"].values() for o in path.values()):
        operation["responses"].pop("422", None)
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError", "ResponseValidationError"):
        schemas.pop(unused, None)
    request = StartRunRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(request.pop("$defs", {}))
    document["components"]["schemas"]["StartRunRequest"] = request
    for path, model, required in (
        ("/approvals/{approval_id}/deny", DenyRequest, True),
        ("/approvals/{approval_id}/approve", ApproveRequest, False),
        ("/approvals/{approval_id}/answer", AnswerRequest, True),
        ("/runs/{run_id}/calls/{call_id}/result", ResultRequest, True),
    ):
        schemas[model.__name__] = model.model_json_schema(ref_template="#/components/schemas/{model}")
        document["paths"][path]["post"]["requestBody"] = {
            "required": required,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
        }
    # The approval page answers HTML, whatever the route's return type says.
    html = {"text/html": {"schema": {"type": "string"}}}
    page_answers = {
        "200": "The page: the call and its forms, or who decided it (GET, HEAD); the decision (POST).",
        "400": "A form that cannot be taken (a blank reason, arguments that fail the tool's checks): "
        "the page again with the error; nothing decided.",
        "403": "A link that is not valid, a missing or foreign CSRF token, another site's form; (POST) "
        "edited arguments where link edits are off.",
        "409": "Already decided (POST): the first decision stands.",
        "410": "The link expired, or the run ended: the call no longer waits.",
        "503": "The signing key cannot be read (nothing changed); or (POST) the run could not be "
        "told: the page says whether the decision is recorded, and offers to send it again.",
    }
    for method, operation in document["paths"]["/approvals/{approval_id}/page"].items():
        operation["responses"] = {
            code: {"description": text, "content": html}
            for code, text in page_answers.items()
            if method == "post" or code != "409"
        }
        operation["security"] = []  # the link's signature is the credential
    operation = document["paths"]["/runs"]["post"]
    operation["requestBody"] = {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/StartRunRequest"}}},
    }
    operation["parameters"] = [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY.pattern},
            "description": "One run per caller and key: a retry gets the first answer.",
        }
    ]
    # The 429's wait, in seconds (RFC 9110 10.2.3), as `start_run` sets it.
    operation["responses"]["429"]["headers"] = {
        "Retry-After": {
            "description": f"Seconds to wait: what is left of the {WINDOW_SECONDS} s window (runs started "
            f"a minute), or {RUNNING_RETRY_AFTER_SECONDS} (runs running at once).",
            "schema": {"type": "integer", "minimum": 1, "maximum": WINDOW_SECONDS},
        }
    }
    started = operation["responses"].get("202")
    if started is not None:
        started["headers"] = {
            "Idempotent-Replayed": {
                "description": "true when an earlier request with the same Idempotency-Key started this run",
                "schema": {"type": "string", "enum": ["true"]},
            }
        }
    # A deleted run's 204 has no body, whatever the route's return type gives it.
    document["paths"]["/runs/{run_id}"]["delete"]["responses"]["204"].pop("content", None)
    # The stage path, deployed (API Gateway stage `v1`) and under `toolpipe serve`.
    document["servers"] = [{"url": "/v1"}]
    # What the handler checks after the model or the pattern, stated where the schema can say it.
    for operation in (o for path in document["paths"].values() for o in path.values()):
        for parameter in operation.get("parameters", []):
            if parameter["name"] == "limit":  # parsed from `LIMIT` text, then this range
                default = int(parameter["schema"]["default"])
                parameter["schema"] = {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": PAGE_LIMIT,
                    "default": default,
                }
    start = schemas["StartRunRequest"]["properties"]
    start["timezone"]["pattern"] = TIMEZONE_PATTERN  # and a zone the runtime knows (`with_deployment`)
    for shape in start["metadata"]["anyOf"]:
        if shape.get("type") == "object":
            shape["additionalProperties"] = False  # a key is one of `patternProperties`
    return document


@cache
def time_zones() -> list[str]:
    # The zones `StartRunRequest` takes: its pattern, and a file in the runtime's tz database.
    return sorted(z for z in available_timezones() | {"UTC"} if re.fullmatch(TIMEZONE_PATTERN, z))


def with_deployment(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with what only this deployment knows, so that every start it admits is taken:
    its agents, the tools all of them have, the time zones its runtime has, and no `mcp_servers`
    unless runs may name their own (docs/openapi.json, made for no deployment, cannot say)."""
    document = copy.deepcopy(document)
    start = document["components"]["schemas"]["StartRunRequest"]["properties"]
    agents = all_agents()
    start["agent"]["anyOf"][0]["enum"] = [agent.name for agent in agents]
    # The schema cannot tie the list to the agent named: the tools every agent has.
    common = set.intersection(*({tool.name for tool in agent.tools} for agent in agents)) if agents else set()
    listed = start["tools"]["anyOf"][0]
    if common:
        listed["items"]["enum"] = sorted(common)
    else:
        listed["maxItems"] = 0
    start["timezone"]["enum"] = time_zones()
    if not api_settings.allow_run_mcp_servers:
        del start["mcp_servers"]
    return document


@app.get("/openapi.json", include_in_schema=False)
def openapi() -> dict[str, Any]:
    return with_deployment(openapi_document())


@logger.inject_lambda_context(clear_state=True)
@trace_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
