"""An execution's history is answered a page at a time, as AWS answers it.

moto: GetExecutionHistory answers the whole history at once, whatever the request asks:
`maxResults`, `nextToken`, `reverseOrder` and `includeExecutionData` are not read.

Why it matters: AWS answers at most `maxResults` events (100 when it is 0 or absent, 1,000 at
most) and a `nextToken` for the rest
(https://docs.aws.amazon.com/step-functions/latest/apireference/API_GetExecutionHistory.html).
Every reader of a history here pages through it (the transitions count, `shared/costs/
transitions.py`, and `LocalRuntime.execution_events`), and with moto that loop never ran. A
read without execution data (`includeExecutionData: false`, the count's) gets the events
without their input and output, which are most of a history's bytes: the count of a long
run's execution copied and parsed them all.

The patch: the events of moto's answer, in the order asked, after the event the token names,
up to the page's size; a token for the rest when there is more. moto copied the whole history
for each answer (deep, every event): read a page at a time, a 25,000-event history would be
copied 25 times, with every other request waiting (infra/local/serial.py). The history is now
handed over uncopied and only the page is copied, which is what the answer's readers get. A
token names its execution, its order and the last event it answered (events are only added, so
a page never skips or repeats one); one that is not this execution's, or is not a token at all, is refused with
`InvalidToken`, as AWS refuses it. Without execution data, each event's details lose their
`input` and `output` (the API's words for execution data); what the details say of them
(`inputDetails`, `truncated`) stays, and so do a task's `parameters` and a state's assigned
variables, which the reference does not name (what AWS does with them is not documented).
"""

import base64
import binascii
import bisect
import copy
import datetime
import enum
import json
from typing import Any

from moto.core.responses import ActionResult
from moto.stepfunctions.exceptions import InvalidToken, ValidationException
from moto.stepfunctions.parser.asl.eval.event.event_manager import EventManager
from moto.stepfunctions.responses import StepFunctionResponse

CHECKED_WITH = ("5.2.5",)

DEFAULT_PAGE = 100
MAX_PAGE = 1000
# The API's words for an event's execution data.
EXECUTION_DATA = ("input", "output")

_motos_own = StepFunctionResponse.get_execution_history


def _token(execution_arn: str, reverse: bool, last_id: int) -> str:
    text = json.dumps({"execution": execution_arn, "reverse": reverse, "after": last_id})
    return base64.urlsafe_b64encode(text.encode()).decode()


def _after(token: str, execution_arn: str, reverse: bool) -> int:
    """The id of the last event the token's page answered; refused as AWS refuses a bad token."""
    try:
        read = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, UnicodeError, ValueError, RecursionError):  # not a token of ours
        raise InvalidToken("'Invalid token'") from None
    if (
        not isinstance(read, dict)
        or read.get("execution") != execution_arn
        or read.get("reverse") is not reverse
        or type(read.get("after")) is not int
    ):
        raise InvalidToken("'Invalid token'")
    return int(read["after"])


# What an event holds that cannot change: shared by a copy, as `copy.deepcopy` shares them.
_IMMUTABLE = (str, int, float, bool, type(None), datetime.datetime, enum.Enum)


def _copied(value: Any) -> Any:
    """A copy of an event for its reader: its dicts and lists new, its values shared when they
    cannot change (anything else deep-copied), without `deepcopy`'s memo of every object."""
    if type(value) is dict:
        return {key: _copied(item) for key, item in value.items()}
    if type(value) is list:
        return [_copied(item) for item in value]
    return value if isinstance(value, _IMMUTABLE) else copy.deepcopy(value)


def _without_data(event: dict[str, Any]) -> dict[str, Any]:
    """The event with its details' input and output left out (moto's own dicts untouched)."""
    out = dict(event)
    for key, value in event.items():
        if key.endswith("EventDetails") and isinstance(value, dict):
            out[key] = {k: v for k, v in value.items() if k not in EXECUTION_DATA}
    return out


def get_execution_history(self: StepFunctionResponse) -> ActionResult:
    size = self._get_int_param("maxResults", 0)
    if not 0 <= size <= MAX_PAGE:
        raise ValidationException(
            f"1 validation error detected: Value '{size}' at 'maxResults' failed to satisfy "
            f"constraint: Member must have value {'less' if size > 0 else 'greater'} than or equal "
            f"to {MAX_PAGE if size > 0 else 0}"
        )
    execution_arn = str(self._get_param("executionArn"))
    reverse = bool(self._get_param("reverseOrder", False))
    token = self._get_param("nextToken")
    result: Any = _motos_own(self).result  # moto's GetExecutionHistoryOutput: a dict
    answer = dict(result)
    events: list[dict[str, Any]] = list(answer.get("events") or [])
    ids = [int(event["id"]) for event in events]  # ascending: moto appends them in order
    start, stop = 0, len(events)
    if token is not None:
        after = _after(str(token), execution_arn, reverse)
        if reverse:
            stop = bisect.bisect_left(ids, after)
        else:
            start = bisect.bisect_right(ids, after)
    page_size = size or DEFAULT_PAGE
    if reverse:
        page = events[max(start, stop - page_size) : stop][::-1]
        more = stop - page_size > start
    else:
        page = events[start : start + page_size]
        more = start + page_size < stop
    page = [_copied(event) for event in page]  # the events themselves are moto's (`_events`)
    if self._get_param("includeExecutionData") is False:
        page = [_without_data(event) for event in page]
    answer["events"] = page
    answer.pop("nextToken", None)
    if more:
        answer["nextToken"] = _token(execution_arn, reverse, int(page[-1]["id"]))
    return ActionResult(answer)


def _events(self: EventManager) -> Any:
    """The history's events, uncopied (a new list): its one reader, GetExecutionHistory, copies
    the page it answers (above); the serializer it may fall back to only reads them."""
    with self._mutex:
        return list(self._history_event_list)


def install() -> None:
    StepFunctionResponse.get_execution_history = get_execution_history  # type: ignore[method-assign]
    EventManager.get_event_history = _events  # type: ignore[method-assign]
