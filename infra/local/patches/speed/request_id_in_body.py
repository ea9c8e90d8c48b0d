"""An answer's body is searched for a request id only when it has the element that holds one.

moto: every answer's body goes through a regular expression that puts the request id into a
`<RequestId>` element (XML answers), a lookbehind tried at each character of the body, JSON
bodies included, where it can never match.

Why it matters: it is paid by every request moto serves, in proportion to the answer's size; an
execution's history (every event with its data, which the orchestrator reads once per
execution) is the largest answer of a run.

The patch: a text body without `<RequestId>` is left as it is without the search, which could
not have matched; the status and the request id header are set as moto sets them. Any other
body goes moto's way.
"""

from typing import Any

from moto.core import responses

CHECKED_WITH = ("5.2.5",)

_original_enrich = responses.BaseResponse._enrich_response


def enrich_response(headers: dict[str, Any], body: Any) -> tuple[dict[str, Any], Any]:
    """moto's `_enrich_response`, without the search where it cannot match."""
    if type(body) is not str or "<RequestId>" in body:
        return _original_enrich(headers, body)
    if "status" in headers:
        headers["status"] = str(headers["status"])
    # Looked up when called, as moto's function does: the id is drawn as `request_ids` draws it.
    responses.gen_amzn_requestid_long(headers)  # type: ignore[attr-defined]
    return headers, body


def install() -> None:
    responses.BaseResponse._enrich_response = staticmethod(enrich_response)  # type: ignore[method-assign]
