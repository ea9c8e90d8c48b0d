"""A request id is drawn from two UUIDs.

moto: each response's 52-character request id is drawn one random character at a time.

Why it matters: it is paid by every request moto serves.

The patch: ids come from two UUIDs. They only have to be unique; moto's seeded random is for
tests that replay ids, which nothing here does.
"""

import uuid
from typing import Any

from moto.core import responses
from moto.utilities import aws_headers

CHECKED_WITH = ("5.2.5",)


def _request_id(headerdict: dict[str, Any] | None = None) -> str:
    request_id = (uuid.uuid4().hex + uuid.uuid4().hex)[:52].upper()
    if isinstance(headerdict, dict):
        headerdict["x-amzn-requestid"] = request_id
    return request_id


def install() -> None:
    responses.gen_amzn_requestid_long = _request_id  # type: ignore[attr-defined]  # imported there, not exported
    aws_headers.gen_amzn_requestid_long = _request_id
