"""The API's OpenAPI document: Powertools' generator run on the routes, plus what it cannot say.

The routes declare their answers (`documented`), their bodies (`request_body`, through
`openapi_extensions`: the handlers read bodies themselves, so Powertools sees none) and their
headers. What is edited after generation, and why, is in `document`.
"""

import copy
import json
import re
from functools import cache
from typing import Any
from zoneinfo import available_timezones

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.event_handler.openapi.models import Server
from pydantic import BaseModel

from toolpipe.functions.api.identity import CALLER_RULE
from toolpipe.shared.agents import Agent
from toolpipe.shared.deferred.models import AnswerRequest, ApproveRequest, DenyRequest, ResultRequest
from toolpipe.shared.messages import TIMEZONE_PATTERN, ForkRunRequest, ResumeRunRequest, StartRunRequest
from toolpipe.shared.runs.quota import RUNNING_RETRY_AFTER_SECONDS, WINDOW_SECONDS
from toolpipe.shared.runs.report import PAGE_LIMIT
from toolpipe.shared.runs.views import ErrorBody

TITLE = "toolpipe runs API"
DESCRIPTION = (
    "LLM tool calling as a durable serverless pipeline. IAM (SigV4) authorized; the caller is the "
    "signer, a role's session as its role `arn:aws:iam::ACCOUNT:role/NAME` (or a Lambda authorizer's "
    f"principalId, or `api-key:` and the API key's id). A caller identity {CALLER_RULE}: a longer "
    "one is answered 400."
)
# The bodies the handlers parse themselves (`request.parsed_body`), named by `request_body`.
REQUEST_BODIES: tuple[type[BaseModel], ...] = (
    StartRunRequest,
    ResumeRunRequest,
    ForkRunRequest,
    DenyRequest,
    ApproveRequest,
    AnswerRequest,
    ResultRequest,
)
ERROR_REASONS = {
    400: "A bad body, header or parameter: the message names the field. Also a caller identity "
    f"longer than any key can hold: it {CALLER_RULE}.",
    403: "The request carries no caller identity.",
    404: "No such run (or not the caller's).",
    409: "A conflict: the key started another request, the run already ended (cancel) or cannot be resumed or forked there, or it is "
    "still running (delete).",
    429: "The caller is over a quota: runs started a minute (`Retry-After`: the seconds left in "
    f"the {WINDOW_SECONDS} s window) or runs running at once (`Retry-After`: "
    f"{RUNNING_RETRY_AFTER_SECONDS} s). Nothing was started.",
    503: "The run could not be told: the message says whether the decision is recorded (the "
    "same request again delivers it) or not (nothing changed; send it again).",
}


def documented(status: int, model: Any, description: str, *errors: int) -> dict[int, Any]:
    """OpenAPI responses of a route: its answer's model, and the error codes it can give."""
    error = {"application/json": {"model": ErrorBody}}
    return {status: {"description": description, "content": {"application/json": {"model": model}}}} | {
        code: {"description": ERROR_REASONS[code], "content": error} for code in errors
    }


def request_body(model: type[BaseModel], required: bool = True) -> dict[str, Any]:
    """A route's `openapi_extensions` naming the body it parses (one of `REQUEST_BODIES`)."""
    schema = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}}


def html_responses(answers: dict[int, str]) -> dict[int, Any]:
    """The responses of a route that answers HTML, whatever its return type says."""
    html = {"text/html": {"schema": {"type": "string"}}}
    return {code: {"description": text, "content": html} for code, text in answers.items()}


def html_page(description: str, *errors: int) -> dict[int, Any]:
    """The responses of a route that answers an HTML page, and its errors in JSON as every route's."""
    error = {"application/json": {"model": ErrorBody}}
    return html_responses({200: description}) | {
        code: {"description": ERROR_REASONS[code], "content": error} for code in errors
    }


def document(app: APIGatewayRestResolver) -> dict[str, Any]:
    """The OpenAPI document of `app`'s routes, as docs/openapi.json holds it."""
    generated: dict[str, Any] = json.loads(
        app.get_openapi_json_schema(
            title=TITLE,
            version="1",
            description=DESCRIPTION,
            # The stage path, deployed (API Gateway stage `v1`) and under `toolpipe serve`.
            servers=[Server(url="/v1")],
        )
    )
    operations = [o for path in generated["paths"].values() for o in path.values()]
    schemas = generated["components"]["schemas"]
    # With validation on, Powertools documents a 422 on every route and its error schemas; bad
    # parameters are answered 400 here (`errors.bad_parameters`), never 422.
    for operation in operations:
        operation["responses"].pop("422", None)
    for unused in ("HTTPValidationError", "ValidationError", "ResponseValidationError"):
        schemas.pop(unused, None)
    # Powertools puts in components only the models it parses or answers: the bodies the
    # handlers parse themselves are added here.
    for model in REQUEST_BODIES:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    # Powertools gives every response a `content`: a deleted run's 204 has no body.
    generated["paths"]["/runs/{run_id}"]["delete"]["responses"]["204"].pop("content", None)
    _state_checked_rules(operations, schemas)
    return generated


def _state_checked_rules(operations: list[dict[str, Any]], schemas: dict[str, Any]) -> None:
    """What the handlers check after the model or the pattern, stated where the schema can say
    it: Powertools writes a parameter's schema from its Python type, the models theirs."""
    for operation in operations:
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
    start["timezone"]["pattern"] = TIMEZONE_PATTERN  # and a zone the runtime knows (`for_deployment`)
    for shape in start["metadata"]["anyOf"]:
        if shape.get("type") == "object":
            shape["additionalProperties"] = False  # a key is one of `patternProperties`


@cache
def time_zones() -> list[str]:
    # The zones `StartRunRequest` takes: its pattern, and a file in the runtime's tz database.
    return sorted(z for z in available_timezones() | {"UTC"} if re.fullmatch(TIMEZONE_PATTERN, z))


def for_deployment(
    document: dict[str, Any], agents: list[Agent], allow_run_mcp_servers: bool
) -> dict[str, Any]:
    """`document` with what only this deployment knows, so that every start it admits is taken:
    its agents, the tools all of them have, the time zones its runtime has, and no `mcp_servers`
    unless runs may name their own (docs/openapi.json, made for no deployment, cannot say)."""
    document = copy.deepcopy(document)
    start = document["components"]["schemas"]["StartRunRequest"]["properties"]
    start["agent"]["anyOf"][0]["enum"] = [agent.name for agent in agents]
    # The schema cannot tie the list to the agent named: the tools every agent has.
    common = set.intersection(*({tool.name for tool in agent.tools} for agent in agents)) if agents else set()
    listed = start["tools"]["anyOf"][0]
    if common:
        listed["items"]["enum"] = sorted(common)
    else:
        listed["maxItems"] = 0
    start["timezone"]["enum"] = time_zones()
    if not allow_run_mcp_servers:
        del start["mcp_servers"]
    return document
