"""An item's size is counted once as it is built, and with less work per attribute as it changes.

moto: an item's attributes live in a dict that refuses an attribute taking the item past its
size limit (`LimitedSizeDict`, ~405 KB: AWS's 400 KB as moto measured it). Each attribute set
sums the size of every attribute already there, through `DynamoType.size` (four type tests a
value); building an item sets its attributes one at a time, so an item of n attributes costs
n²/2 sizes, for each item a write makes.

Why it matters: every write builds or changes an item (a run's record has some 30 attributes),
~2.5% of a local run's instructions (measured with callgrind).

The patch: building an item keeps a running total, which is what each set would have summed
(nothing else changes the dict while it is built); a set on an item afterwards sums as before,
with a string's, a number's and a boolean's size read directly (the same counts
`DynamoType.size` gives; any other type still asks it). The limit and the error are moto's.
"""

from typing import Any

from moto.dynamodb.exceptions import ItemSizeTooLarge
from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
from moto.dynamodb.models.utilities import bytesize

CHECKED_WITH = ("5.2.5",)

# moto's own limit (dynamo_type.py): AWS's 400 KB, measured between 409 and 410 KB.
LIMIT = 405000

_motos_set = LimitedSizeDict.__setitem__
_motos_init = Item.__init__


def _text_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def size_of(value: Any) -> int:
    """What `LimitedSizeDict` counts for a key or a value: `DynamoType.size()` for a typed value,
    else the UTF-8 length of its text."""
    if type(value) is not DynamoType:
        return _text_size(value) if type(value) is str else bytesize(str(value))
    kind, raw = value.type, value.value
    if kind == "S" and type(raw) is str:
        return _text_size(raw)
    if kind == "N" and type(raw) is str:  # `len(str(value))`: the digits as written
        return len(raw)
    if kind in ("BOOL", "NULL") and type(raw) is bool:
        return 1
    return value.size()


def _set_within_limit(self: LimitedSizeDict, key: str, value: Any) -> None:
    current = 0
    for name, held in dict.items(self):
        current += size_of(name) + size_of(held)
    if current + size_of(key) + size_of(value) > LIMIT:
        raise ItemSizeTooLarge
    dict.__setitem__(self, key, value)


def _item_init(self: Item, hash_key: DynamoType, range_key: DynamoType | None, attrs: dict[str, Any]) -> None:
    self.hash_key = hash_key
    self.range_key = range_key
    self.attrs = LimitedSizeDict()
    total = 0  # the sum each set would make of the attributes set before it
    for key, raw in attrs.items():
        value = DynamoType(raw)
        added = size_of(key) + size_of(value)
        if total + added > LIMIT:
            raise ItemSizeTooLarge
        dict.__setitem__(self.attrs, key, value)
        total += added


def install() -> None:
    LimitedSizeDict.__setitem__ = _set_within_limit  # type: ignore[method-assign]
    Item.__init__ = _item_init  # type: ignore[method-assign]
