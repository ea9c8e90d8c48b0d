"""An UpdateItem copies its item only for what uses the copy.

moto: every UpdateItem deep-copies the item twice before updating it: once to answer the
values it returns (the old attributes, then rendered as JSON and compared with the new ones)
and once for the table's stream (the old image), whether the request returns values or not
and whether the table has a stream or not.

Why it matters: the two copies were a quarter of an UpdateItem's time (more for a large item),
and a run's end updates every item it holds; every run's counters are updates too.

The patch: a request that returns no values (`ReturnValues` absent or `NONE`) or only the new
item (`ALL_NEW`, a run's usage update) gets no copy for its answer (moto then compares the new
attributes with none, and answers none of them, or all the new item, as it would have); an
update of an item whose table has no stream gets no copy for it (moto passes the copy to the
stream alone). Everything else is copied as before.
"""

import contextvars
import copy
from typing import Any

import moto.dynamodb.models
import moto.dynamodb.responses
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import Item
from moto.dynamodb.responses import DynamoHandler

CHECKED_WITH = ("5.2.5",)

# Set while a request that returns no values runs (the answer's copy is unused), and while an
# update of a table without a stream runs (the stream's copy is unused).
_answer_unused: contextvars.ContextVar[bool] = contextvars.ContextVar("answer_unused", default=False)
_stream_unused: contextvars.ContextVar[bool] = contextvars.ContextVar("stream_unused", default=False)

# What an update may return without the item as it was: nothing, or the item as it is after.
_NO_OLD_VALUES = ("NONE", "ALL_NEW")

_motos_handler = DynamoHandler.update_item
_motos_update = DynamoDBBackend.update_item


class _AnswerCopy:
    """The `copy` module as moto's DynamoDB responses see it: the old item of a request that
    returns no values is not copied (None: there was nothing to compare)."""

    copy = staticmethod(copy.copy)

    @staticmethod
    def deepcopy(value: Any, memo: Any = None) -> Any:
        if _answer_unused.get() and isinstance(value, Item):
            return None
        return copy.deepcopy(value, memo)


class _StreamCopy:
    """The `copy` module as moto's DynamoDB backend sees it, around the one it saw before: an
    item updated in a table without a stream is not copied (the copy is the stream's)."""

    def __init__(self, before: Any) -> None:
        self.copy = before.copy
        self._deepcopy = before.deepcopy

    def deepcopy(self, value: Any, memo: Any = None) -> Any:
        if _stream_unused.get() and isinstance(value, Item):
            return value
        return self._deepcopy(value, memo)


# Each request sets both flags for itself, whatever an enclosing one set: an update can run inside
# another (a stream's trigger runs its function in-process, during the update that fed it).
def _update_item_handler(self: DynamoHandler) -> Any:
    token = _answer_unused.set(self.body.get("ReturnValues", "NONE") in _NO_OLD_VALUES)
    try:
        return _motos_handler(self)
    finally:
        _answer_unused.reset(token)


def _update_item(self: DynamoDBBackend, table_name: str, *args: Any, **kwargs: Any) -> Any:
    table = self.tables.get(table_name)  # a missing one: moto's error, copying as before
    token = _stream_unused.set(table is not None and table.stream_shard is None)
    try:
        return _motos_update(self, table_name, *args, **kwargs)
    finally:
        _stream_unused.reset(token)


def install() -> None:
    # Rebinds the `copy` module each moto module looks up (imported there, not exported); the
    # backend's is `transaction_rollback`'s, which this wraps (installed before it).
    moto.dynamodb.responses.copy = _AnswerCopy  # type: ignore[attr-defined, assignment]
    before: Any = moto.dynamodb.models.copy  # type: ignore[attr-defined]
    if not isinstance(before, _StreamCopy):
        moto.dynamodb.models.copy = _StreamCopy(before)  # type: ignore[attr-defined, assignment]
    DynamoHandler.update_item = _update_item_handler  # type: ignore[method-assign]
    DynamoDBBackend.update_item = _update_item  # type: ignore[method-assign]
