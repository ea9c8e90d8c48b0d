"""A run you can see: its timeline as JSON, its timeline page and the runs list (HTML). GET only.

Authorized as `GET /runs/{id}` is: the caller's own runs (or the admin's view of any); a run
that is not the caller's is a 404, like an unknown one (`errors.STATUSES`). Deployed, the pages
sit behind the API's authorization like every other route (README "The timeline page").
"""

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from toolpipe.functions.api.identity import current_caller
from toolpipe.functions.api.openapi import documented, html_page
from toolpipe.functions.api.page import timeline_page
from toolpipe.functions.api.request import RunId
from toolpipe.functions.api.services import services_of
from toolpipe.shared.runs.report import MAX_TOKEN_CHARS, TOKEN_PATTERN
from toolpipe.shared.runs.timeline import Timeline

router = Router()  # type: ignore[no-untyped-call]  # Powertools leaves its __init__ unannotated


def _html(body: str) -> Response[str]:
    return Response(
        status_code=200,
        content_type="text/html; charset=utf-8",
        body=body,
        headers=dict(timeline_page.HEADERS),
    )


@router.get(
    "/runs/<run_id>/timeline",
    operation_id="getTimeline",
    tags=["timeline"],
    summary="The run's timeline: turns, tool calls in time, waits for a person, handoffs, child runs",
    description="What the run's timeline page draws, bounded: previews only (the whole items are "
    "`GET /runs/{run_id}/messages/{seq}`), the latest turns that fit.",
    responses=documented(200, Timeline, "The run's timeline.", 400, 403, 404),
)
def get_timeline(run_id: RunId) -> dict[str, Any]:
    caller = current_caller(router.current_event)
    return services_of(router).timeline.timeline(run_id, caller).model_dump(mode="json")


@router.get(
    "/ui/runs/<run_id>",
    operation_id="getTimelinePage",
    tags=["timeline"],
    summary="The run's timeline page (HTML): live while the run goes on",
    responses=html_page("The run's timeline page.", 400, 403, 404),
)
def timeline_html(run_id: RunId) -> Response[str]:
    caller = current_caller(router.current_event)
    return _html(timeline_page.timeline_page(services_of(router).timeline.timeline(run_id, caller)))


@router.get(
    "/ui/runs",
    operation_id="listRunsPage",
    tags=["timeline"],
    summary="The caller's runs (HTML), newest first: status, agent, duration, cost",
    responses=html_page("A page of the caller's runs.", 400, 403),
)
def runs_html(
    next: Annotated[
        str | None,
        Query(
            pattern=TOKEN_PATTERN,
            max_length=MAX_TOKEN_CHARS,
            description="The `Older runs` link's token, as is.",
        ),
    ] = None,  # the name the API uses
) -> Response[str]:
    caller = current_caller(router.current_event)
    return _html(timeline_page.runs_page(services_of(router).timeline.runs(caller, next)))
