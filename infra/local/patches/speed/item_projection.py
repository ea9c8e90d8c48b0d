"""An item is projected from the attributes the projection names, not from the whole item.

moto: `Item.project` converted the whole item to plain Python (every attribute deserialized,
and deep-copied on the way) once for each path of the projection, then kept what the path
names. An index's projection is one path per attribute it keeps, for each item a query returns.

Why it matters: the run record is read with a projection after every write of a run (whether
it ended), and it holds ~35 attributes: most of that read's time.

The patch: a path starts with one attribute of the item (moto's own rule: `name[3]` is `name`'s
element), so each path is looked up, as moto looks it up, in that attribute alone, converted
as moto converts it. The same attributes, in the same order, come out.

One difference, where moto is not AWS: an item holding a number of more than 38 digits (moto
stores it; AWS refuses the write, as the runtime now does for a function's writes,
`service_limits.py`) made moto's projection fail whatever it named, since it converted every
attribute; here only a projection that names that attribute fails.
"""

import re
from typing import Any

from botocore.utils import merge_dicts
from moto.dynamodb.models import dynamo_type
from moto.dynamodb.models.dynamo_type import Item
from moto.dynamodb.models.utilities import find_nested_key

CHECKED_WITH = ("5.2.5",)

# `find_nested_key`'s own test for a path that starts at a list's element.
_LIST_ELEMENT = re.compile(r"(.+)\[(\d+)\]$")
_motos_own = Item.project


def _first_attribute(item: Item, first: str) -> dict[str, Any]:
    """What `item.to_regular_json()` holds of the attribute a path starting with `first` reads."""
    element = _LIST_ELEMENT.match(first)
    name = element.group(1) if element else first
    attribute = item.attrs.get(name)
    if attribute is None:
        return {}
    return {name: dynamo_type.deserializer.deserialize(attribute.to_regular_json())}


def project(self: Item, projection_expressions: list[list[str]]) -> Item:
    result: dict[str, Any] = {}
    for expr in projection_expressions:
        found = find_nested_key(expr, _first_attribute(self, expr[0]))
        merge_dicts(result, found)
    return Item(
        hash_key=self.hash_key,
        range_key=self.range_key,
        attrs=dict(dynamo_type.serializer.serialize(result)["M"]),
    )


def install() -> None:
    Item.project = project  # type: ignore[method-assign]
