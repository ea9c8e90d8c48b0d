"""A stopped state folder's saved state, read without moto: the table and the content bucket as
`persistence.py` left them in `state.json`, behind the few read calls of a boto3 `Table`
resource and an S3 client that the history and approval stores make to answer the runs API's
reads.

Why this shape: the views a command prints (`GET /runs/{id}`, its messages, `GET /approvals`)
are built by `RunReader`, `DynamoHistoryStore` and `DynamoApprovalStore`, which read through a
boto3 table. Reading the snapshot through that same surface keeps one copy of every view,
conversion and authorization rule: the output is the server's by construction. A port of our own
under the stores would be the cleaner seam, but it means rewriting every read of two stores the
whole pipeline shares, for one caller; booting moto to load the snapshot is what costs the
seconds this module saves.

Only the expressions those reads use are understood (`a = :v`, `a BETWEEN :x AND :y`,
`begins_with(a, :v)`, joined by AND); anything else raises `UnsupportedReadError`, so a store that
starts reading another way fails loudly in the tests instead of answering wrongly. Read only:
there is no write call to make by mistake.

Whole or not: a cleanly stopped server compacts its journal into the snapshot and leaves the
journal with only its header line. A journal with more lines of the snapshot's generation is a
crash's (kill -9): the snapshot is then not the whole state, and only a server, which replays
and compacts it, may read it (`journal_pending`).
"""

import base64
import binascii
import io
import json
import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from toolpipe.shared.dynamo import CALLER_INDEX, CALLER_INDEX_PK, CALLER_INDEX_SK

SNAPSHOT = "state.json"
JOURNAL = "journal.jsonl"
# The partition and sort key of the table and of its one index (`shared/dynamo.py`).
KEYS: dict[str | None, tuple[str, str]] = {
    None: ("pk", "sk"),
    CALLER_INDEX: (CALLER_INDEX_PK, CALLER_INDEX_SK),
}

Item = dict[str, Any]
Condition = Callable[[Item], bool]


class SnapshotError(Exception):
    """The saved state cannot be read: not JSON, or not the shape `persistence.py` writes."""


class UnsupportedReadError(Exception):
    """A read this adapter does not understand: a store reads in a way it was not taught."""


def journal_pending(home: Path, generation: int) -> bool:
    """Whether the journal holds requests the snapshot of `generation` does not (a crash's)."""
    try:
        lines = (home / JOURNAL).read_bytes().split(b"\n")
    except FileNotFoundError:
        return False
    try:
        header = json.loads(lines[0])
    except ValueError:
        return True  # unreadable: the server decides what to keep of it, and says so
    # A journal of an older generation is folded in already (persistence.py, `_replay`).
    return isinstance(header, dict) and header.get("generation") == generation and any(lines[1:])


class Snapshot:
    """`state.json`: the table's items (as a boto3 resource gives them) and the bucket's objects."""

    def __init__(self, generation: int, items: list[Item], objects: dict[str, bytes]) -> None:
        self.generation = generation
        self.items = items
        self.objects = objects

    @classmethod
    def load(cls, path: Path) -> "Snapshot":
        """Raises:
        FileNotFoundError: no snapshot.
        SnapshotError: a file that is not one, or that cannot be read."""
        try:
            data = json.loads(path.read_bytes())
            items = [{name: _value(value) for name, value in item.items()} for item in data.get("items", [])]
            if not all(isinstance(item.get("pk"), str) and isinstance(item.get("sk"), str) for item in items):
                raise ValueError("an item without its string keys pk and sk")
            return cls(
                int(data.get("generation", 0)),
                items,
                {key: base64.b64decode(body, validate=True) for key, body in data.get("objects", {}).items()},
            )
        except FileNotFoundError:
            raise
        except OSError as e:  # a folder in its place, no permission: not the reader's to fix
            raise SnapshotError(f"{path} cannot be read ({type(e).__name__}: {e.strerror})") from e
        # RecursionError: nesting deeper than Python parses; OverflowError: `1e400` as an int.
        except (
            ValueError,
            TypeError,
            AttributeError,
            KeyError,
            binascii.Error,
            RecursionError,
            OverflowError,
        ) as e:
            raise SnapshotError(f"{path} is not a saved state ({type(e).__name__}: {e})") from e

    def table(self, name: str) -> "SnapshotTable":
        return SnapshotTable(name, self.items)

    def bucket(self, name: str) -> "SnapshotBucket":
        return SnapshotBucket(name, self.objects)


def snapshot_path(home: Path) -> Path:
    return home / SNAPSHOT


def _value(typed: dict[str, Any]) -> Any:
    """One DynamoDB JSON value as boto3's resource layer gives it (numbers as `Decimal`)."""
    ((kind, value),) = typed.items()
    return _TYPES[kind](value)


# Each DynamoDB JSON type, read (botocore's TypeDeserializer, less boto3's import cost).
_TYPES: dict[str, Callable[[Any], Any]] = {
    "S": str,
    "BOOL": bool,
    "N": Decimal,
    "NULL": lambda _: None,
    "B": base64.b64decode,
    "M": lambda value: {k: _value(v) for k, v in value.items()},
    "L": lambda value: [_value(v) for v in value],
    "SS": set,
    "NS": lambda value: {Decimal(v) for v in value},
    "BS": lambda value: {base64.b64decode(v) for v in value},
}


class SnapshotTable:
    """The reads of a boto3 `Table` the stores make, over the snapshot's items: `get_item`,
    `query` (the table or its caller index) and `scan`, each answering in one page."""

    def __init__(self, name: str, items: list[Item]) -> None:
        self.name = name
        self._items = items
        self._by_key = {(item["pk"], item["sk"]): item for item in items}

    def get_item(self, *, Key: Item, ProjectionExpression: str | None = None, **_: Any) -> Item:
        item = self._by_key.get((Key["pk"], Key["sk"]))
        if item is None:
            return {}
        return {"Item": _projected(item, ProjectionExpression)}

    def query(
        self,
        *,
        KeyConditionExpression: str,
        ExpressionAttributeValues: Item,
        ExpressionAttributeNames: dict[str, str] | None = None,
        FilterExpression: str | None = None,
        IndexName: str | None = None,
        ScanIndexForward: bool = True,
        ProjectionExpression: str | None = None,
        **_: Any,  # ConsistentRead, Limit: one page holds everything
    ) -> Item:
        if IndexName not in KEYS:
            raise UnsupportedReadError(f"no index {IndexName!r} in the saved state")
        pk, sk = KEYS[IndexName]
        names, values = ExpressionAttributeNames or {}, ExpressionAttributeValues
        key = _condition(KeyConditionExpression, names, values)
        keep = _condition(FilterExpression, names, values)
        found = sorted(
            (item for item in self._items if pk in item and sk in item and key(item) and keep(item)),
            # DynamoDB orders strings by their UTF-8 bytes: the order of their code points.
            key=lambda item: str(item[sk]),
            reverse=not ScanIndexForward,
        )
        return {"Items": [_projected(item, ProjectionExpression) for item in found]}

    def scan(
        self,
        *,
        FilterExpression: str | None = None,
        ExpressionAttributeValues: Item | None = None,
        ExpressionAttributeNames: dict[str, str] | None = None,
        **_: Any,
    ) -> Item:
        keep = _condition(FilterExpression, ExpressionAttributeNames or {}, ExpressionAttributeValues or {})
        return {"Items": [item for item in self._items if keep(item)]}


class SnapshotBucket:
    """The content bucket's objects, read as `s3.get_object(...)["Body"].read()` reads them."""

    def __init__(self, name: str, objects: dict[str, bytes]) -> None:
        self._name = name
        self._objects = objects

    def get_object(self, *, Bucket: str, Key: str) -> Item:
        if Bucket != self._name or Key not in self._objects:
            raise KeyError(f"s3://{Bucket}/{Key} is not in the saved state")
        return {"Body": io.BytesIO(self._objects[Key])}


def _projected(item: Item, projection: str | None) -> Item:
    if projection is None:
        return item
    wanted = {name.strip() for name in projection.split(",")}
    return {k: v for k, v in item.items() if k in wanted}


# One term of a condition: `a = :v`, `a BETWEEN :x AND :y` or `begins_with(a, :v)`.
_TERM = re.compile(
    r"\s*(?:(?P<name>[#\w]+)\s*=\s*(?P<value>:\w+)"
    r"|(?P<between>[#\w]+)\s+BETWEEN\s+(?P<low>:\w+)\s+AND\s+(?P<high>:\w+)"
    r"|begins_with\(\s*(?P<prefixed>[#\w]+)\s*,\s*(?P<prefix>:\w+)\s*\))\s*"
)


def _condition(expression: str | None, names: dict[str, str], values: Item) -> Condition:
    """`expression` (terms joined by AND) as a test of an item."""
    if expression is None:
        return lambda item: True
    terms: list[Condition] = []
    position = 0
    while True:
        match = _TERM.match(expression, position)
        if match is None:
            raise UnsupportedReadError(f"cannot read the saved state with {expression!r}")
        terms.append(_term(match, names, values))
        position = match.end()
        if position == len(expression):
            return lambda item: all(term(item) for term in terms)
        if not expression.startswith("AND", position):
            raise UnsupportedReadError(f"cannot read the saved state with {expression!r}")
        position += len("AND")


def _term(match: re.Match[str], names: dict[str, str], values: Item) -> Condition:
    def name(group: str) -> str:
        raw = match[group]
        return names[raw] if raw.startswith("#") else raw

    if match["name"]:
        attribute, wanted = name("name"), values[match["value"]]
        return lambda item: attribute in item and item[attribute] == wanted
    if match["between"]:
        attribute, low, high = name("between"), values[match["low"]], values[match["high"]]
        return lambda item: attribute in item and low <= item[attribute] <= high
    attribute, prefix = name("prefixed"), values[match["prefix"]]
    return lambda item: isinstance(item.get(attribute), str) and item[attribute].startswith(prefix)
