"""A query by partition key reads that partition alone.

moto: a query looked at every item of the table for the few of its partition.

Why it matters: a run's step read its history in time that grew with every other run's.

The patch: a base-table query looks at its partition alone (tables keep items by partition key,
so the set is the same), and only at the items its sort key condition admits.
"""

import threading
from typing import Any

from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table

CHECKED_WITH = ("5.2.5",)

_query = Table.query
_all_items = Table.all_items
_partition = threading.local()  # the partition (and sort key condition) a base-table query reads


def _query_one_partition(self: Table, hash_key: DynamoType | None, *args: Any, **kwargs: Any) -> Any:
    index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
    if index_name or hash_key is None:
        return _query(self, hash_key, *args, **kwargs)
    range_comparison = kwargs.get("range_comparison", args[0] if args else None)
    range_objs = kwargs.get("range_objs", args[1] if len(args) > 1 else [])
    _partition.key = hash_key
    _partition.condition = (
        (range_comparison, range_objs) if self.range_key_attr and range_comparison else None
    )
    try:
        return _query(self, hash_key, *args, **kwargs)
    finally:
        _partition.key = _partition.condition = None


def _items_of_partition(self: Table) -> list[Item]:
    hash_key = getattr(_partition, "key", None)
    if hash_key is None:
        return _all_items(self)
    found = self.items.get(hash_key)  # get, not []: the dict is a defaultdict
    if found is None:
        return []
    if not self.range_key_attr:
        return [found]  # type: ignore[list-item]  # moto's hash-only tables keep the item itself
    condition = _partition.condition
    if condition is None:
        return list(found.values())
    # The sort key condition picks the same items before moto sorts them as after: a query for
    # the newest items of a long history sorts those few, not the whole partition.
    comparison, values = condition
    return [item for item in found.values() if item.range_key.compare(comparison, values)]


def install() -> None:
    Table.query = _query_one_partition  # type: ignore[method-assign]
    Table.all_items = _items_of_partition  # type: ignore[method-assign]
