"""What a request carries, read once: its path and query parameters' rules, and its body.

Every bad input is a 400 naming the field (`invalid request: path.seq: ...`), bodies included.
Bodies are read here rather than by Powertools' validation: to bound them before parsing and to
word every error the same way.
"""

import base64
import binascii
from typing import Annotated, TypeVar

from aws_lambda_powertools.event_handler.exceptions import BadRequestError
from aws_lambda_powertools.event_handler.openapi.params import Path
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent
from pydantic import BaseModel, ValidationError

from toolpipe.functions.api.identity import CALLER_RULE
from toolpipe.shared.deferred.models import APPROVAL_ID_PATTERN
from toolpipe.shared.errors import describe_validation_error
from toolpipe.shared.messages import RunStatus
from toolpipe.shared.runs.report import PAGE_LIMIT

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
ApprovalId = Annotated[str, Path(pattern=APPROVAL_ID_PATTERN)]
Seq = Annotated[str, Path(pattern=SEQ)]

Body = TypeVar("Body", bound=BaseModel)


def parsed_body(event: BaseProxyEvent, model: type[Body], what: str, empty: str = "{}") -> Body:
    """The request body as `model` (an empty body as `empty`); a 400 naming `what` otherwise."""
    try:
        return model.model_validate_json(request_body(event) or empty)
    except ValidationError as e:
        raise BadRequestError(f"invalid {what} request: {describe_validation_error(e, 'body')}") from e


def request_body(event: BaseProxyEvent) -> str | bytes:
    """The raw body, bounded and base64-decoded when API Gateway encoded it."""
    body = event.body or ""
    if len(body) > MAX_BODY_CHARS:
        raise BadRequestError(f"invalid run request: body: larger than {MAX_BODY_CHARS:,} characters")
    if not event.is_base64_encoded:
        return body
    try:
        return base64.b64decode(body, validate=True)  # invalid UTF-8 inside is the parser's to refuse
    except binascii.Error as e:
        raise BadRequestError("invalid run request: body: not valid base64") from e


def page_limit(limit: str) -> int:
    """A `limit` that matched `LIMIT`, in range; the 400 `bad_parameters` would give otherwise."""
    if not 1 <= int(limit) <= PAGE_LIMIT:
        raise BadRequestError(f"invalid request: query.limit: {PARAMETER_RULES['limit']}")
    return int(limit)
