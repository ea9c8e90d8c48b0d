"""A DynamoDB transaction copies the items it names, not the tables it touches.

moto: a transaction deep-copied every table it touched, to roll back on failure: every item of
every run, for each tool call's one-item transaction.

Why it matters: a long-lived dev server got slower with all it ever stored.

The patch: the items the transaction names are copied instead (its operations touch distinct
items, so restoring those is the whole rollback), and the tables are not.
"""

import copy
from typing import Any

import moto.dynamodb.models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table

CHECKED_WITH = ("5.2.5",)


class _TablesNotCopied:
    """The `copy` module as moto's DynamoDB backend sees it: tables come back as they are (the
    transaction's rollback is done per item, below); anything else is copied as before."""

    copy = staticmethod(copy.copy)

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        return value if isinstance(value, Table) else copy.deepcopy(value, memo)


Saved = tuple[Table, DynamoType, DynamoType | None, Item | None]
_transact_write_items = DynamoDBBackend.transact_write_items


def _items_named(backend: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> list[Saved]:
    saved: list[Saved] = []
    for entry in transact_items[:100]:  # more is refused before anything is written
        try:
            ((op_type, op),) = entry.items()
            table = backend.tables[op["TableName"]]
            attributes = op["Item"] if op_type == "Put" else op["Key"]
            hash_key = DynamoType(attributes[table.hash_key_attr])
            range_key = DynamoType(attributes[table.range_key_attr]) if table.range_key_attr else None
            current = table.get_item(hash_key, range_key)
        except Exception:
            continue  # a malformed operation: the transaction refuses it and writes nothing of it
        saved.append((table, hash_key, range_key, copy.deepcopy(current)))
    return saved


def _transact_write_items_copying_items(self: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
    saved = _items_named(self, transact_items)
    try:
        _transact_write_items(self, transact_items)
    except BaseException:
        for table, hash_key, range_key, item in reversed(saved):
            if item is None:
                table.delete_item(hash_key, range_key)
            elif range_key is not None:
                table.items[hash_key][range_key] = item
            else:
                table.items[hash_key] = item  # type: ignore[assignment]  # moto's hash-only tables keep the item itself
        raise


def install() -> None:
    # Rebinds the `copy` module the backend looks up (imported there, not exported).
    moto.dynamodb.models.copy = _TablesNotCopied  # type: ignore[attr-defined, assignment]
    DynamoDBBackend.transact_write_items = _transact_write_items_copying_items  # type: ignore[method-assign]
