"""REST API: start, list, inspect, cancel and delete runs; list and decide approvals; the
approval page; the runs' timeline pages; its OpenAPI document. GET never changes state.

Who calls is the request's identity as API Gateway reports it (IAM: the signer's ARN), never
a body field (`identity`). Every bad input is a 400 naming the field, bodies included; a run
that is not the caller's is a 404, like an unknown one (`errors`).
"""

from functools import partial
from typing import Any

from toolpipe.shared import collector

# What the cold start builds here lasts the function's life: the collector's passes would only
# walk it, so it is built with the collector paused, then, on Lambda, frozen (shared/collector.py).
with collector.cold_start():
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.event_handler import APIGatewayRestResolver
    from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from toolpipe.functions.api import approvals, errors, openapi, runs, timeline
    from toolpipe.functions.api.page import routes as page
    from toolpipe.functions.api.services import CONTEXT_KEY, ApiServices, FunctionSettings
    from toolpipe.shared.agents import all_agents
    from toolpipe.shared.costs.invocation import API_REQUEST, metered
    from toolpipe.shared.history.errors import QuotaExceededError
    from toolpipe.shared.runs.errors import IdempotencyConflictError
    from toolpipe.shared.tracing import trace_handler

    logger = Logger()
    services = ApiServices(FunctionSettings.from_env())
    # Validation of path and query parameters; its errors are answered 400, like bodies'.
    app = APIGatewayRestResolver(enable_validation=True)
    for router in (runs.router, timeline.router, approvals.router, page.router):
        app.include_router(router)

    # Registered by call: the decorator is untyped.
    app.exception_handler(list(errors.STATUSES))(errors.domain_error)
    app.exception_handler(IdempotencyConflictError)(errors.idempotency_conflict)
    app.exception_handler(QuotaExceededError)(errors.quota_exceeded)
    app.exception_handler(RequestValidationError)(partial(errors.bad_parameters, app))
    app.exception_handler(Exception)(partial(errors.unexpected, app))


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of this API, as docs/openapi.json holds it."""
    return openapi.document(app)


def with_deployment(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with what only this deployment knows: its agents and their tools, whether runs
    may name MCP servers, and (`toolpipe serve`) the header that names the caller."""
    api = services.settings.api
    return openapi.for_deployment(document, all_agents(), api.allow_run_mcp_servers, api.local_caller_header)


@app.get("/openapi.json", include_in_schema=False)
def serve_openapi() -> dict[str, Any]:
    return with_deployment(openapi_document())


@logger.inject_lambda_context(clear_state=True)
@trace_handler
@metered("api", lambda: services.costs, per_request=API_REQUEST)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    app.append_context(**{CONTEXT_KEY: services})  # type: ignore[no-untyped-call]  # cleared after each request
    return app.resolve(event, context)
