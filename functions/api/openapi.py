"""The API's OpenAPI document: Powertools' generator run on the routes, plus what it cannot say.

The routes declare their answers (`documented`), their bodies (`request_body`, through
`openapi_extensions`: the handlers read bodies themselves, so Powertools sees none) and their
headers. What is edited after generation, and why, is in `document`.
"""

import copy
import json
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from pydantic import BaseModel

from toolpipe.functions.api.identity import CALLER_RULE
from toolpipe.shared.agents import Agent
from toolpipe.shared.deferred.bodies import AnswerRequest, ApproveRequest, DenyRequest, ResultRequest
from toolpipe.shared.messages import TIMEZONE_PATTERN, ForkRunRequest, ResumeRunRequest, StartRunRequest
from toolpipe.shared.runs.quota import RUNNING_RETRY_AFTER_SECONDS, WINDOW_SECONDS
from toolpipe.shared.runs.report import PAGE_LIMIT
from toolpipe.shared.runs.views import ErrorBody

TITLE = "toolpipe runs API"
DESCRIPTION = (
    "LLM tool calling as a durable serverless pipeline. IAM (SigV4) authorized, or by API key where "
    "the stack was deployed with `api_auth=api_key` (`securitySchemes`); the caller is the signer, a "
    "role's session as its role `arn:aws:iam::ACCOUNT:role/NAME` (or a Lambda authorizer's "
    f"principalId, or `api-key:` and the API key's id). A caller identity {CALLER_RULE}: a longer "
    "one is answered 400."
)
# What the stack deploys (infra/cdk/constructs/api.py): IAM on every method, or (`api_auth=api_key`)
# an API key instead. A generated client picks the scheme it signs with from these.
SECURITY_SCHEMES: dict[str, dict[str, Any]] = {
    "sigv4": {
        "type": "apiKey",
        "in": "header",
        "name": "Authorization",
        "description": "AWS Signature Version 4 (IAM authorization, the stack's default `api_auth=iam`): "
        "sign each request for the service `execute-api` in the API's region with the caller's "
        "credentials. The signer is the caller that owns the runs.",
        "x-amazon-apigateway-authtype": "awsSigv4",
    },
    "apiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "x-api-key",
        "description": "A deployment with `api_auth=api_key`: the stack's API key (its `ApiKeyId` "
        "output), throttled by a usage plan. The key's id is the caller that owns the runs.",
    },
}
# Either scheme, as the stack was deployed: every operation but the approval page's (whose
# signed link is the credential: `security: []`).
SECURITY: list[dict[str, list[str]]] = [{"sigv4": []}, {"apiKey": []}]
# `toolpipe serve` (infra/local/server.py) takes no signature: who calls is this header, served in
# its document only (`for_deployment`), as the deployed API ignores it.
LOCAL_CALLER_SCHEME = "localCaller"
# Each operation's tag: the resource it acts on, one module of a generated client each.
TAGS = [
    {"name": "runs", "description": "Start, list, read, cancel and delete runs."},
    {
        "name": "messages",
        "description": "A run's history: the user's input, the model's replies, the tools' results.",
    },
    {
        "name": "approvals",
        "description": "Calls waiting for a person or a program: list, approve, deny, answer.",
    },
    {"name": "calls", "description": "Results of client-executed calls, posted by the caller's program."},
    {"name": "timeline", "description": "A run's timeline, as JSON and as pages."},
    {"name": "pages", "description": "The approval page behind a signed link (HTML)."},
]
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
    403: "The request carries no caller identity, or API Gateway refused it before the API saw it: "
    "no valid signature or key, or a method this path does not have (`Missing Authentication Token`).",
    404: "No such run (or not the caller's).",
    409: "A conflict: the key started another request, the run already ended (cancel), cannot be resumed "
    "or forked there or is past its `retain_until` (resume, fork), or it is still running (delete).",
    429: "Too many requests: API Gateway's throttle (any route), or, starting a run, the caller is "
    "over a quota: runs started a minute (`Retry-After`: the seconds left in the "
    f"{WINDOW_SECONDS} s window) or runs running at once (`Retry-After`: "
    f"{RUNNING_RETRY_AFTER_SECONDS} s). Nothing was started.",
    500: "An unexpected error (AWS unavailable, a bug): the message names the request's id, to find "
    "it in the logs. Nothing is half done: a start or a decision may be sent again.",
    503: "The run could not be told: the message says whether the decision is recorded (the "
    "same request again delivers it) or not (nothing changed; send it again).",
}
# What any route may answer besides its own errors: API Gateway's throttle and an unexpected error.
EVERY_ROUTE_ERRORS = (403, 429, 500)


def error_responses(*codes: int) -> dict[int, Any]:
    """The responses for error `codes`, each an `ErrorBody` as `errors.error_response` answers it."""
    error = {"application/json": {"model": ErrorBody}}
    return {code: {"description": ERROR_REASONS[code], "content": error} for code in sorted(set(codes))}


def documented(status: int, model: Any, description: str, *errors: int) -> dict[int, Any]:
    """OpenAPI responses of a route: its answer's model, and the error codes it can give (and
    those every route can: `EVERY_ROUTE_ERRORS`)."""
    answer = {"description": description, "content": {"application/json": {"model": model}}}
    return {status: answer} | error_responses(*errors, *EVERY_ROUTE_ERRORS)


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
    return html_responses({200: description}) | error_responses(*errors, *EVERY_ROUTE_ERRORS)


def document(app: APIGatewayRestResolver) -> dict[str, Any]:
    """The OpenAPI document of `app`'s routes, as docs/openapi.json holds it."""
    # Imported here: Powertools' OpenAPI models cost the API function ~30 ms of every cold start,
    # and only this request needs them.
    from aws_lambda_powertools.event_handler.openapi.models import Server

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
    # Powertools writes an operation's `security` only when it is not empty (the approval
    # page's `[]` is given as an extension): every other operation takes the stack's schemes.
    generated["components"]["securitySchemes"] = copy.deepcopy(SECURITY_SCHEMES)
    for operation in operations:
        operation.setdefault("security", copy.deepcopy(SECURITY))
    generated["tags"] = copy.deepcopy(TAGS)
    _state_checked_rules(operations, schemas)
    _timestamps(schemas)
    return generated


# The parameters that are history slots (a message's `seq`, a call's slot, the cursors of the
# messages and executions pages): integers, as `seq` is in every body, though the path and
# query carry them as text (`request.SEQ`).
SLOT_PARAMETERS = {"seq", "call_id", "after", "executions_after"}
MAX_SLOT = 999_999  # `request.SEQ`: 1 to 6 digits


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
            elif parameter["name"] in SLOT_PARAMETERS:  # `SEQ` text: 0 to 999999
                slot: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": MAX_SLOT}
                if "default" in parameter["schema"]:
                    slot["default"] = int(parameter["schema"]["default"])
                parameter["schema"] = slot
    start = schemas["StartRunRequest"]["properties"]
    # And a zone the runtime's tz database has: a pattern, not the list, which differs by runtime
    # and whose names (GMT+0, GMT-0, GMT0) collapse into one enum key in a generated client.
    start["timezone"]["pattern"] = TIMEZONE_PATTERN
    for shape in start["metadata"]["anyOf"]:
        if shape.get("type") == "object":
            shape["additionalProperties"] = False  # a key is one of `patternProperties`


def _timestamps(schemas: dict[str, Any]) -> None:
    """`format: date-time` on every timestamp (a `*_at` string: `utc_now`'s RFC 3339 text)."""
    for schema in schemas.values():
        for name, field in schema.get("properties", {}).items():
            if name.endswith("_at"):
                for shape in field.get("anyOf", [field]):
                    if shape.get("type") == "string":
                        shape["format"] = "date-time"


def for_deployment(
    document: dict[str, Any],
    agents: list[Agent],
    allow_run_mcp_servers: bool,
    local_caller_header: str | None = None,
) -> dict[str, Any]:
    """`document` with what only this deployment knows: its agents, the tools they have, no
    `mcp_servers` unless runs may name their own, and (`toolpipe serve`) the header that names
    the caller (docs/openapi.json, made for no deployment, cannot say). Nothing else differs:
    a client generated from either is the same client."""
    document = copy.deepcopy(document)
    start = document["components"]["schemas"]["StartRunRequest"]["properties"]
    start["agent"]["anyOf"][0]["enum"] = [agent.name for agent in agents]
    # The schema cannot tie the list to the agent named: a tool any agent has (the starter
    # refuses one the named agent lacks, naming it).
    tools = sorted({tool.name for agent in agents for tool in agent.tools})
    listed = start["tools"]["anyOf"][0]
    if tools:
        listed["items"]["enum"] = tools
    else:
        listed["maxItems"] = 0
    if not allow_run_mcp_servers:
        del start["mcp_servers"]
    if local_caller_header is not None:
        document["components"]["securitySchemes"][LOCAL_CALLER_SCHEME] = {
            "type": "apiKey",
            "in": "header",
            "name": local_caller_header,
            "description": "`toolpipe serve` only, which checks no signature: the caller's identity "
            "(an IAM ARN) in this header; without it, the server's local user. An empty value sends "
            "no identity (a 403). Anyone who reaches the port can claim any identity.",
        }
        for path in document["paths"].values():
            for operation in path.values():
                if operation["security"]:
                    operation["security"].append({LOCAL_CALLER_SCHEME: []})
    return document
