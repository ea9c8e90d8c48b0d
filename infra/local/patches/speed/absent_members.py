"""A structure member that a dict answer lacks is skipped without asking the attribute picker.

moto: its response serializer asks the attribute picker for every member of every structure
shape, present or not; the picker builds a context and up to six alias providers per member and
tries each alias. A Step Functions history event has ~60 members (one details field per event
type), of which a dict holds four or five.

Why it matters: the orchestrator counts an ended execution's transitions from its whole history
(moto sends every event, with its data, whatever the request asks), which was ~13% of a run's
CPU; every JSON answer of a dict goes through the same walk.

The patch: for a plain dict, the keys the picker would try for a member (its aliases: they
depend on the member's shape and on the object's class, here always `dict`) are worked out once
per member shape; a member none of them names is left out at once, as the picker's None left it
out. Anything else (another class, a picker or alias provider of its own, response
transformers, a dotted alias) goes the picker's way, unchanged.
"""

import threading
from typing import Any

from moto.core import serialize
from moto.core.model import Shape
from moto.core.serialize import (
    DEFAULT_ALIAS_PROVIDERS,
    AttributePicker,
    AttributePickerContext,
    DefaultAttributePicker,
    ResponseSerializer,
    XFormedAttributePicker,
)

CHECKED_WITH = ("5.2.5",)

_original_member = ResponseSerializer._serialize_structure_member
_original_get_value = ResponseSerializer.get_value
_ALIAS_PICKERS = (AttributePicker, XFormedAttributePicker)
# (picker class, alias providers, member shape, key): the keys the picker tries, or None when
# it may find a value some other way (a dotted key is a path).
_keys: dict[tuple[type, tuple[type, ...], Shape, str], tuple[str, ...] | None] = {}
_keys_lock = threading.Lock()
_UNKNOWN = object()


def _possible_keys(picker: Any, shape: Shape, key: str) -> tuple[str, ...] | None:
    picker_class = type(picker)
    if picker_class is DefaultAttributePicker:
        return None if "." in key else (key,)
    if picker_class not in _ALIAS_PICKERS or picker.response_transformers:
        return None
    cache_key = (picker_class, tuple(picker.alias_providers), shape, key)
    found = _keys.get(cache_key, _UNKNOWN)  # a dict read is atomic: no lock to read
    if found is not _UNKNOWN:
        return found  # type: ignore[return-value]
    if any(provider not in DEFAULT_ALIAS_PROVIDERS for provider in cache_key[1]):
        found = None
    else:
        # The default providers read the shape (and its parent) and the object's class only.
        keys = tuple(picker.get_possible_keys(AttributePickerContext(obj={}, key=key, shape=shape)))
        found = None if any("." in k for k in keys) else keys
    with _keys_lock:
        _keys[cache_key] = found
    return found


def structure_member(self: ResponseSerializer, serialized: Any, value: Any, shape: Shape, key: str) -> None:
    """moto's `_serialize_structure_member`, which skips a dict's absent members at once."""
    if type(value) is dict and type(self).get_value is _original_get_value:
        keys = _possible_keys(self._value_picker, shape, key)
        if keys is not None and not any(k in value for k in keys):
            return  # the picker would have found nothing: moto leaves the member out
    _original_member(self, serialized, value, shape, key)


def install() -> None:
    serialize.ResponseSerializer._serialize_structure_member = structure_member  # type: ignore[method-assign]
