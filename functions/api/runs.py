"""Runs: start, list, inspect, cancel and delete them. GET never changes state.

A run that is not the caller's is a 404, like an unknown one (`errors.STATUSES`).
"""

import re
from http import HTTPStatus
from typing import Annotated, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.exceptions import BadRequestError, ForbiddenError, NotFoundError
from aws_lambda_powertools.event_handler.openapi.params import Query

from toolpipe.functions.api.errors import API_KEY_PREFIX
from toolpipe.functions.api.identity import CALLER_RULE, current_caller, current_signer, status_url
from toolpipe.functions.api.openapi import documented, request_body
from toolpipe.functions.api.request import LIMIT, PARAMETER_RULES, SEQ, RunId, Seq, page_limit, parsed_body
from toolpipe.functions.api.services import services_of
from toolpipe.shared.costs import meter
from toolpipe.shared.dynamo import MAX_CALLER_BYTES, caller_fits
from toolpipe.shared.messages import (
    IDEMPOTENCY_KEY_PATTERN,
    NAME_PATTERN,
    ForkRunRequest,
    ResumeRunRequest,
    RunRecord,
    RunStatus,
    StartRunRequest,
)
from toolpipe.shared.runs.quota import RUNNING_RETRY_AFTER_SECONDS, WINDOW_SECONDS
from toolpipe.shared.runs.report import MAX_TOKEN_CHARS, PAGE_LIMIT, RUNS_PAGE_DEFAULT, TOKEN_PATTERN
from toolpipe.shared.runs.views import (
    HistoryEntry,
    MessagesPage,
    RunCancelled,
    RunDetail,
    RunList,
    RunResumed,
    RunStarted,
)

logger = Logger()
router = Router()  # type: ignore[no-untyped-call]  # Powertools leaves its __init__ unannotated

IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
# `POST /runs` reads its header itself (to trim it as HTTP does, and word its 400), so
# Powertools sees no parameter: it is declared here, with the body.
START_DOCUMENT = request_body(StartRunRequest) | {
    "parameters": [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY.pattern},
            "description": "One run per caller and key: a retry gets the first answer.",
        }
    ]
}
REPLAYED = {
    "Idempotent-Replayed": {
        "description": "true when an earlier request with the same Idempotency-Key started this run",
        "schema": {"type": "string", "enum": ["true"]},
    }
}
# The 429's wait, in seconds (RFC 9110 10.2.3), as `errors.quota_exceeded` sets it.
RETRY_AFTER = {
    "Retry-After": {
        "description": f"Seconds to wait: what is left of the {WINDOW_SECONDS} s window (runs started "
        f"a minute), or {RUNNING_RETRY_AFTER_SECONDS} (runs running at once).",
        "schema": {"type": "integer", "minimum": 1, "maximum": WINDOW_SECONDS},
    }
}


RESUME_RESPONSES = documented(202, RunResumed, "The run goes on in a new execution.", 400, 403, 404, 409, 429)
RESUME_RESPONSES[202]["headers"] = REPLAYED
RESUME_RESPONSES[429]["headers"] = RETRY_AFTER
FORK_RESPONSES = documented(202, RunStarted, "The fork started.", 400, 403, 404, 409, 429)
FORK_RESPONSES[202]["headers"] = REPLAYED
FORK_RESPONSES[429]["headers"] = RETRY_AFTER
START_RESPONSES = documented(202, RunStarted, "The run started.", 400, 403, 409, 429)
START_RESPONSES[202]["headers"] = REPLAYED
START_RESPONSES[429]["headers"] = RETRY_AFTER


def idempotency_key(headers: dict[str, str]) -> str | None:
    key = headers.get("idempotency-key")  # Powertools matches any case
    if key is None:
        return None
    key = key.strip(" \t")  # HTTP drops a field value's surrounding whitespace (RFC 9110 5.5)
    if not IDEMPOTENCY_KEY.match(key):
        raise BadRequestError(
            "invalid request: header.Idempotency-Key: 1 to 255 printable characters, no spaces"
        )
    return key


@router.post(
    "/runs",
    operation_id="startRun",
    tags=["runs"],
    summary="Start a run",
    description="Body: StartRunRequest. With an `Idempotency-Key` header, the same key and body "
    "start one run however often they are sent (a repeat is answered `Idempotent-Replayed: true`); "
    "the same key with another body is a 409.",
    responses=START_RESPONSES,
    openapi_extensions=START_DOCUMENT,
)
def start_run() -> Response[dict[str, Any]]:
    event = router.current_event
    caller = current_caller(event)
    request = parsed_body(event, StartRunRequest, "run", empty="")
    services = services_of(router)
    if request.mcp_servers and not services.settings.api.allow_run_mcp_servers:
        raise BadRequestError("mcp_servers is not enabled here (TOOLPIPE_ALLOW_RUN_MCP_SERVERS)")
    key = idempotency_key(event.headers)
    record, replayed = services.starter.start(
        request,
        caller,
        idempotency_key=None if key is None else API_KEY_PREFIX + key,
        traceparent=event.headers.get("traceparent"),  # Powertools matches any case
    )
    meter.attribute(record.run_id)
    logger.info("run started", run_id=record.run_id, agent=record.agent, replayed=replayed)
    return _started(event, record, replayed)


@router.get(
    "/runs",
    operation_id="listRuns",
    tags=["runs"],
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
    count = page_limit(limit)
    if caller is not None and caller != "*" and not caller_fits(caller):
        raise BadRequestError(f"invalid request: query.caller: {PARAMETER_RULES['caller']}")
    try:
        return services_of(router).reader.list_runs(
            current_caller(router.current_event),
            owner=None if caller == "*" else caller,
            every=caller == "*",
            status=status,
            agent=agent,
            limit=count,
            token=next,
        )
    except PermissionError as e:
        # Here only, not for every route: a PermissionError is also an OSError (a file the
        # function cannot read), which is a 500, not a 403.
        raise ForbiddenError(str(e)) from e


@router.get(
    "/runs/<run_id>",
    operation_id="getRun",
    tags=["runs"],
    summary="A run: status, usage, answer (or its link), a page of its tool executions",
    responses=documented(200, RunDetail, "The run.", 400, 403, 404),
)
def get_run(run_id: RunId, executions_after: Annotated[str, Query(pattern=SEQ)] = "0") -> dict[str, Any]:
    """The run and a page of its tool executions (previews); `executions_next` reads on."""
    return services_of(router).reader.run(run_id, current_caller(router.current_event), int(executions_after))


@router.get(
    "/runs/<run_id>/messages",
    operation_id="listMessages",
    tags=["messages"],
    summary="A page of the run's history, in order",
    responses=documented(200, MessagesPage, "History items after `after`.", 400, 403, 404),
)
def get_messages(
    run_id: RunId,
    after: Annotated[str, Query(pattern=SEQ)] = "0",
    limit: Annotated[str, Query(pattern=LIMIT)] = str(PAGE_LIMIT),
) -> dict[str, Any]:
    """The history, a page of previews at a time, after seq `after`; `next` reads on."""
    count = page_limit(limit)
    return services_of(router).reader.messages(
        run_id, current_caller(router.current_event), int(after), count
    )


@router.get(
    "/runs/<run_id>/messages/<seq>",
    operation_id="getMessage",
    tags=["messages"],
    summary="One whole history item (a preview and a presigned `url` when over 5 MB)",
    responses=documented(200, HistoryEntry, "The history item.", 400, 403, 404),
)
def get_message(run_id: RunId, seq: Seq) -> dict[str, Any]:
    """One whole history item, or a preview and a presigned `url` when it is too large."""
    item = services_of(router).reader.message(run_id, current_caller(router.current_event), int(seq))
    if item is None:
        raise NotFoundError(f"run {run_id} has no message {int(seq)}")
    return item


@router.post(
    "/runs/<run_id>/cancel",
    operation_id="cancelRun",
    tags=["runs"],
    summary="Cancel a run and its child runs",
    description="Stops the run's execution and those of its child runs (agent tools) and marks "
    "them `cancelled`. Cancelling a cancelled run answers the same again; a run that ended "
    "otherwise is a 409.",
    responses=documented(200, RunCancelled, "The run is cancelled.", 400, 403, 404, 409),
)
def cancel_run(run_id: RunId) -> dict[str, Any]:
    event = router.current_event
    caller = current_caller(event)
    record, replayed = services_of(router).canceller.cancel(run_id, caller, by=current_signer(event))
    # Once the run is known to be the caller's: another caller's cancel (a 404) counts in no run.
    meter.attribute(run_id)
    logger.info("run cancelled", run_id=run_id, replayed=replayed)
    return RunCancelled(
        run_id=record.run_id, status=record.status, status_url=status_url(event, run_id)
    ).model_dump(mode="json")


@router.post(
    "/runs/<run_id>/resume",
    operation_id="resumeRun",
    tags=["runs"],
    summary="Resume a run that ended failed or limit",
    description="Body (optional): ResumeRunRequest. The run goes on from its last stored turn in a new "
    "execution, with the limits raised as asked; a call already done is never run again, one in doubt "
    "stays in doubt. With an `Idempotency-Key` header, a repeat is answered `Idempotent-Replayed: true`. "
    "A run that is running, succeeded or was cancelled, or is past its `retain_until` (its items may "
    "be expiring), is a 409; a caller whose runs running at once are at its quota, a 429 (the resumed "
    "run takes a slot).",
    responses=RESUME_RESPONSES,
    openapi_extensions=request_body(ResumeRunRequest, required=False)
    | {"parameters": START_DOCUMENT["parameters"]},
)
def resume_run(run_id: RunId) -> Response[dict[str, Any]]:
    event = router.current_event
    caller = current_caller(event)
    request = parsed_body(event, ResumeRunRequest, "resume")
    key = idempotency_key(event.headers)
    record, replayed = services_of(router).resumer.resume(
        run_id,
        caller,
        request.limits,
        idempotency_key=None if key is None else API_KEY_PREFIX + key,
        by=current_signer(event),
    )
    meter.attribute(run_id)
    logger.info("run resumed", run_id=run_id, execution=record.execution, replayed=replayed)
    return Response(
        status_code=HTTPStatus.ACCEPTED,
        content_type=content_types.APPLICATION_JSON,
        headers={"Idempotent-Replayed": "true"} if replayed else None,
        body=RunResumed(
            run_id=record.run_id,
            status=record.status,
            execution=record.execution,
            status_url=status_url(event, run_id),
        ).model_dump(mode="json"),
    )


@router.post(
    "/runs/<run_id>/fork",
    operation_id="forkRun",
    tags=["runs"],
    summary="Fork a run from a turn: a new run with its first turns",
    description="Body: ForkRunRequest. A new run whose history is the run's first `turn` turns, copied "
    "(no tool of those turns runs again), goes on, with `input` as a new user message if given. The "
    "fork's `forked_from` names the run and turn, and the run lists it in `forks`. Only the run's "
    "owner may fork it (another caller, the admin included, gets a 404). With an `Idempotency-Key`, "
    "one fork per key and body. A fork counts against the caller's quotas as a start does. A run past "
    "its `retain_until` (its items may be expiring) is a 409.",
    responses=FORK_RESPONSES,
    openapi_extensions=request_body(ForkRunRequest) | {"parameters": START_DOCUMENT["parameters"]},
)
def fork_run(run_id: RunId) -> Response[dict[str, Any]]:
    event = router.current_event
    caller = current_caller(event)
    request = parsed_body(event, ForkRunRequest, "fork", empty="")
    key = idempotency_key(event.headers)
    record, replayed = services_of(router).forker.fork(
        run_id, caller, request, idempotency_key=None if key is None else API_KEY_PREFIX + key
    )
    meter.attribute(record.run_id)
    logger.info("run forked", run_id=record.run_id, parent=run_id, turn=request.turn, replayed=replayed)
    return _started(event, record, replayed)


def _started(event: Any, record: RunRecord, replayed: bool) -> Response[dict[str, Any]]:
    """The 202 of a run that started (a start or a fork)."""
    return Response(
        status_code=HTTPStatus.ACCEPTED,
        content_type=content_types.APPLICATION_JSON,
        # A retry gets the same run, as it is now, marked as Stripe marks a replay.
        headers={"Idempotent-Replayed": "true"} if replayed else None,
        body=RunStarted(
            run_id=record.run_id,
            status=record.status,
            agent=record.agent,
            status_url=status_url(event, record.run_id),
            links={"self": f"/runs/{record.run_id}", "messages": f"/runs/{record.run_id}/messages"},
        ).model_dump(mode="json"),
    )


@router.delete(
    "/runs/<run_id>",
    operation_id="deleteRun",
    tags=["runs"],
    summary="Delete an ended run now, with its child runs",
    description="Removes every item and stored object of the run and of its child runs (agent "
    "tools), before their retention runs out. A run, or a child run, still running is a 409: cancel "
    "it first. Deleting a deleted run is a 404.",
    responses=documented(204, None, "The run is deleted (no body).", 400, 403, 404, 409),
)
def delete_run(run_id: RunId) -> Response[None]:
    caller = current_caller(router.current_event)
    deleted = services_of(router).deleter.delete(run_id, caller)
    logger.info("run deleted", run_id=run_id, runs=len(deleted))
    return Response(status_code=HTTPStatus.NO_CONTENT, body=None)
