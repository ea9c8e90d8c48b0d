"""Approvals and other deferred calls: list and read them, approve or deny a waiting call,
answer a question, post a client-executed call's result (README "Human approval").

Only the run's caller or the admin principal may decide or answer; the first decision wins.
"""

import json
from typing import Annotated, Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from toolpipe.functions.api.identity import api_url, current_caller, current_signer
from toolpipe.functions.api.openapi import documented, request_body
from toolpipe.functions.api.request import ApprovalId, RunId, Seq, parsed_body
from toolpipe.functions.api.services import services_of
from toolpipe.shared.costs import meter
from toolpipe.shared.deferred.bodies import (
    AnswerRequest,
    ApprovalDecided,
    ApprovalList,
    ApprovalView,
    ApproveRequest,
    CallAnswered,
    DenyRequest,
    ResultRequest,
)
from toolpipe.shared.deferred.models import Approval, ApprovalStatus

logger = Logger()
router = Router()  # type: ignore[no-untyped-call]  # Powertools leaves its __init__ unannotated


def with_link(approval: Approval) -> dict[str, Any]:
    """An approval as its requester (or the admin) reads it: with its signed link, made under
    the URL this request came to."""
    url = services_of(router).approvals.callback_url(approval, api_url(router.current_event))
    return ApprovalView.of(approval, url).model_dump(mode="json")


@router.get(
    "/approvals",
    operation_id="listApprovals",
    tags=["approvals"],
    summary="List approvals, newest first",
    description="The approvals of the caller's runs (the admin principal: everyone's), at most 100; "
    "`status=pending` for the calls still waiting.",
    responses=documented(200, ApprovalList, "The approvals.", 400, 403),
)
def list_approvals(status: Annotated[ApprovalStatus | None, Query()] = None) -> dict[str, Any]:
    listed = services_of(router).approvals.list(current_caller(router.current_event), status)
    return {"approvals": [with_link(a) for a in listed]}


@router.get(
    "/approvals/<approval_id>",
    operation_id="getApproval",
    tags=["approvals"],
    summary="One approval: the tool, a preview of its arguments, the run, the status",
    responses=documented(200, ApprovalView, "The approval.", 400, 403, 404),
)
def get_approval(approval_id: ApprovalId) -> dict[str, Any]:
    return with_link(services_of(router).approvals.get(approval_id, current_caller(router.current_event)))


def decide(
    approval_id: str, approve: bool, reason: str | None, arguments: str | None = None
) -> dict[str, Any]:
    event = router.current_event
    caller = current_caller(event)
    decided = services_of(router).approvals.decide(
        approval_id, caller, approve, reason, arguments, by=current_signer(event)
    )
    meter.attribute(decided.run_id)
    logger.info(
        "approval decided", approval_id=approval_id, run_id=decided.run_id, status=decided.status.value
    )
    return ApprovalDecided(
        approval_id=approval_id, status="approved" if approve else "denied", run_id=decided.run_id
    ).model_dump(mode="json")


@router.post(
    "/approvals/<approval_id>/approve",
    operation_id="approveApproval",
    tags=["approvals"],
    summary="Approve a waiting call: it runs, with exactly the arguments shown (or yours)",
    description="Body (optional): ApproveRequest. With `arguments`, the call runs with those instead "
    "of the model's, once they pass the tool's validation (else a 400, nothing decided); the model "
    "is told, and the record keeps who edited them (`decided_by`, the signer). Only the run's caller or the admin principal may decide. The first decision wins; "
    "the same decision again is a retry (200; the waiting task is told again only while the first "
    "delivery is uncertain), another one a 409 that changes nothing.",
    responses=documented(
        200, ApprovalDecided, "The call was approved and is dispatched.", 400, 403, 404, 409, 503
    ),
    openapi_extensions=request_body(ApproveRequest, required=False),
)
def approve(approval_id: ApprovalId) -> dict[str, Any]:
    request = parsed_body(router.current_event, ApproveRequest, "approve")
    arguments = None if request.arguments is None else json.dumps(request.arguments, ensure_ascii=False)
    return decide(approval_id, True, None, arguments)


@router.post(
    "/approvals/<approval_id>/deny",
    operation_id="denyApproval",
    tags=["approvals"],
    summary="Deny a waiting call, with a reason the model reads",
    description="Body: DenyRequest. The call is never run; its result tells the model it was denied, "
    "and why. The first decision wins; the same denial again is a retry (200; the waiting task is "
    "told again only while the first delivery is uncertain), another reason or an approval a 409 "
    "that changes nothing.",
    responses=documented(200, ApprovalDecided, "The call was denied.", 400, 403, 404, 409, 503),
    openapi_extensions=request_body(DenyRequest),
)
def deny(approval_id: ApprovalId) -> dict[str, Any]:
    request = parsed_body(router.current_event, DenyRequest, "deny")
    return decide(approval_id, False, request.reason)


def answered(done: Approval) -> dict[str, Any]:
    meter.attribute(done.run_id)
    logger.info("deferred call answered", approval_id=done.approval_id, run_id=done.run_id, seq=done.seq)
    return CallAnswered(
        approval_id=done.approval_id, status="answered", run_id=done.run_id, seq=done.seq
    ).model_dump(mode="json")


@router.post(
    "/approvals/<approval_id>/answer",
    operation_id="answerApproval",
    tags=["approvals"],
    summary="Answer a human-input call: the answer is the call's result",
    description="Body: AnswerRequest. Free text, or a JSON value matching the call's `result_schema`. "
    "Only the run's caller or the admin principal may answer. The first answer wins; any later one "
    "is a 409 and changes nothing.",
    responses=documented(200, CallAnswered, "The answer is the call's result.", 400, 403, 404, 409, 503),
    openapi_extensions=request_body(AnswerRequest),
)
def answer(approval_id: ApprovalId) -> dict[str, Any]:
    event = router.current_event
    request = parsed_body(event, AnswerRequest, "answer")
    approvals = services_of(router).approvals
    return answered(
        approvals.answer(approval_id, current_caller(event), request.answer, by=current_signer(event))
    )


@router.post(
    "/runs/<run_id>/calls/<call_id>/result",
    operation_id="postCallResult",
    tags=["calls"],
    summary="Post the result of a client-executed call",
    description='Body: ResultRequest, `{"result": ...}` or `{"error": "..."}`. `call_id` is the '
    "call's history slot (`slot` in `ToolCallRequested`). Only the run's caller or the admin "
    "principal may post. The first result wins; any later one is a 409 and changes nothing.",
    responses=documented(200, CallAnswered, "The result reached the call.", 400, 403, 404, 409, 503),
    openapi_extensions=request_body(ResultRequest),
)
def post_result(run_id: RunId, call_id: Seq) -> dict[str, Any]:
    event = router.current_event
    request = parsed_body(event, ResultRequest, "result")
    approvals = services_of(router).approvals
    return answered(
        approvals.post_result(run_id, int(call_id), current_caller(event), request, by=current_signer(event))
    )
