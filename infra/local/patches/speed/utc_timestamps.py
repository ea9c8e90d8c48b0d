"""A UTC timestamp string is converted for an answer once, not once per answer.

moto: Step Functions keeps each history event's timestamp as an ISO 8601 string ("...Z"), and
its serializer parses the string again (dateutil, ~0.1 ms) every time an answer carries it.

Why it matters: the orchestrator reads an ended execution's whole history to count its
transitions; parsing the events' timestamps was a fifth of that read.

The patch: a string ending in "Z" is UTC whatever the process's time zone, so its conversion
to a format depends on the string and the format alone: kept (the last 4,096). Other values
(datetimes, numbers, strings without a "Z") are converted as before.
"""

import functools
from typing import Any

from moto.core.serialize import TimestampSerializer

CHECKED_WITH = ("5.2.5",)

_original_convert = TimestampSerializer._convert_timestamp_to_str


@functools.lru_cache(maxsize=4096)
def _converted(value: str, timestamp_format: str) -> Any:
    # The converters read no state of the serializer: any instance converts alike.
    return _original_convert(_CONVERTER, value, timestamp_format)


_CONVERTER = TimestampSerializer(TimestampSerializer.TIMESTAMP_FORMAT_ISO8601)


def convert(self: TimestampSerializer, value: Any, timestamp_format: str) -> Any:
    """moto's `_convert_timestamp_to_str`, each UTC string converted once."""
    if type(value) is str and value.endswith("Z"):
        return _converted(value, timestamp_format)
    return _original_convert(self, value, timestamp_format)


def install() -> None:
    TimestampSerializer._convert_timestamp_to_str = convert  # type: ignore[method-assign]
