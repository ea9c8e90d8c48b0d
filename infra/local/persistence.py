"""Durable local state: the table and the content bucket survive any end of the process, kill -9 included.

The mechanism is a snapshot plus a redo journal, as databases do it:

- `state.json`, the snapshot: every item of the table and every object of the bucket, as
  DynamoDB JSON and base64, plus the journal generation it folds in. JSON rather than a pickle
  of moto's backends: it outlives a moto upgrade, a person can read it, and it is the format
  `state.json` already had (an old one loads as generation 0).
- `journal.jsonl`, the journal: a header line naming its generation, then one line per
  *successful mutating* request, written by one `write()` inside the lock that serialises
  every moto request (`infra/local/serial.py`) and before the caller sees the response. So the
  journal's order is the order moto applied the requests, and a `write()` that returned is in
  the kernel's page cache: it survives kill -9 of this process (not a power cut: no fsync, which
  would cost milliseconds per request for a crash this runtime does not promise to survive).
  DynamoDB lines are the request itself (PutItem, UpdateItem, DeleteItem, TransactWriteItems,
  BatchWriteItem), replayed through the client in journal order against the very state they
  first met: a conditional write or an `ADD` comes out as it did. S3 lines are the effect (the
  object as stored, or its deletion), read back after the request: botocore streams bodies in
  aws-chunked encoding, which is no request worth replaying.

Start-up loads the snapshot, replays the journal if it has the snapshot's generation (a journal
of an older generation is already in the snapshot), then compacts: a new snapshot of generation
g+1 is written to a temporary file, flushed, fsynced and renamed over the old one (a crash
mid-way leaves the old snapshot and its journal whole), and only then does a fresh journal of
g+1 replace the old one. A torn last journal line (kill -9 inside a `write()`) is ignored; a
damaged line before the end stops the replay there and the journal is kept beside the state
for a person to look at, so nothing is dropped without saying so.

One process owns a state directory at a time (an `flock` on `lock`): two would interleave
journals and overwrite each other's snapshots.
"""

import base64
import contextlib
import fcntl
import html
import json
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from botocore import xform_name
from botocore.exceptions import ClientError

from toolpipe.infra.local import serial
from toolpipe.infra.local.isolation import running_as

# The file names, where the reader of a stopped folder's snapshot keeps them (moto-free).
from toolpipe.infra.local.snapshot import JOURNAL as JOURNAL
from toolpipe.infra.local.snapshot import SNAPSHOT as SNAPSHOT

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_s3.client import S3Client

logger = logging.getLogger(__name__)

LOCK = "lock"
# Past this many lines the journal is folded into a new snapshot while the runtime serves:
# replay at start-up stays bounded (~1 ms a line).
COMPACT_AFTER_LINES = 20_000
_DYNAMODB_HOST = "dynamodb."
_DYNAMODB_WRITES = frozenset(
    {
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "TransactWriteItems",
        "BatchWriteItem",
        # PartiQL: a statement may write (INSERT, UPDATE, DELETE); a SELECT replays harmlessly.
        "ExecuteStatement",
        "BatchExecuteStatement",
        "ExecuteTransaction",
    }
)
_S3_WRITES = frozenset({"PUT", "POST", "DELETE"})
_BATCH = 25  # BatchWriteItem's limit


SIGNING_KEY = "approval-signing-key"


def signing_key(state_dir: Path | None) -> str:
    """The approval links' HMAC key: made once per state directory and kept there (owner-only),
    so links a person holds stay valid across restarts. Without a state directory, a fresh one."""
    if state_dir is None:
        return secrets.token_urlsafe(48)
    path = state_dir / SIGNING_KEY
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    state_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(48)
    # O_EXCL: of two processes making it at once, one wins and the other reads the winner's.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
        f.flush()
        os.fsync(f.fileno())
    return key


class StateDirInUseError(RuntimeError):
    """Another process serves this state directory."""


@dataclass
class Restored:
    """What start-up found on disk."""

    items: int = 0
    objects: int = 0
    journal_lines: int = 0
    torn_lines: int = 0
    # Lines replayed that did not come out as they first did: never expected; said aloud.
    diverged: int = 0


class DurableState:
    """The table and the bucket of one runtime, kept in `state_dir`.

    `open()` restores them and starts journaling; `close()` compacts and lets go.
    """

    def __init__(
        self,
        state_dir: Path,
        dynamodb: "DynamoDBClient",
        s3: "S3Client",
        table: str,
        bucket: str,
        more_buckets: tuple[str, ...] = (),
    ) -> None:
        self._dir = state_dir
        self._dynamodb = dynamodb
        self._s3 = s3
        self._table = table
        self._bucket = bucket
        # Kept too (the trigger bucket: its files and answers), under "buckets" in the snapshot.
        self._more_buckets = more_buckets
        self._generation = 0
        self._journal_fd: int | None = None
        self._lock_fd: int | None = None
        self._lines = 0
        self.compact_after_lines = COMPACT_AFTER_LINES

    # --- lifecycle --------------------------------------------------------------------------

    def open(self) -> Restored:
        """Restore the state on disk into moto, fold the journal into a snapshot, start journaling."""
        self._dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            restored = self._restore()
            with serial.exclusive():
                self._compact()
                serial.observe(self._observe)
        except BaseException:
            self._release_lock()
            raise
        return restored

    def close(self) -> None:
        """Stop journaling and leave one snapshot: the next start has nothing to replay."""
        try:
            with serial.exclusive():
                serial.observe(None)
                self._compact()
        finally:
            self._close_journal()
            self._release_lock()

    def _take_lock(self) -> None:
        fd = os.open(self._dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 32).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise StateDirInUseError(
                f"the local state in {self._dir} is in use by process {owner}; stop it or use another TOOLPIPE_HOME"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None

    # --- restore ----------------------------------------------------------------------------

    def _restore(self) -> Restored:
        restored = Restored()
        snapshot_path = self._dir / SNAPSHOT
        if snapshot_path.exists():
            snapshot = json.loads(snapshot_path.read_text())
            self._generation = int(snapshot.get("generation", 0))
            items = snapshot.get("items", [])
            for start in range(0, len(items), _BATCH):
                self._write_batch(items[start : start + _BATCH])
            for key, body in snapshot.get("objects", {}).items():
                self._s3.put_object(Bucket=self._bucket, Key=key, Body=base64.b64decode(body))
            restored.items, restored.objects = len(items), len(snapshot.get("objects", {}))
            for bucket, objects in snapshot.get("buckets", {}).items():
                if bucket in self._more_buckets:
                    for key, body in objects.items():
                        self._s3.put_object(Bucket=bucket, Key=key, Body=base64.b64decode(body))
                    restored.objects += len(objects)
        journal_path = self._dir / JOURNAL
        if journal_path.exists():
            self._replay(journal_path, restored)
        return restored

    def _write_batch(self, items: list[dict[str, Any]]) -> None:
        pending: dict[str, Any] = {self._table: [{"PutRequest": {"Item": item}} for item in items]}
        # Unprocessed items come back only under throttling, which moto does not do; bounded anyway.
        for _ in range(10):
            pending = self._dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems", {})
            if not pending:
                return
        raise RuntimeError("restoring the local table: items stayed unprocessed")

    def _replay(self, path: Path, restored: Restored) -> None:
        lines = path.read_bytes().split(b"\n")
        # A journal that ends in a newline splits into a last empty part; anything else there is
        # a line whose write() was cut short.
        tail = lines.pop()
        if tail:
            restored.torn_lines += 1
        if not lines:
            return
        try:
            header = json.loads(lines[0])
        except ValueError:
            header = {}
        if header.get("generation") != self._generation:
            return  # written before the snapshot was: its lines are in the snapshot already
        for number, line in enumerate(lines[1:], start=2):
            try:
                record = json.loads(line)
            except ValueError:
                kept = path.with_name(f"{JOURNAL}.damaged-{int(time.time())}")
                kept.write_bytes(path.read_bytes())
                logger.warning(
                    "local state journal damaged; replay stopped",
                    extra={"line": number, "kept": str(kept)},
                )
                restored.torn_lines += 1
                return
            restored.journal_lines += 1
            if not self._apply(record):
                restored.diverged += 1
        if restored.diverged:
            logger.warning("local state journal replay diverged", extra={"lines": restored.diverged})

    def _apply(self, record: dict[str, Any]) -> bool:
        """Apply one journal line; False if it did not come out as it first did."""
        if "ddb" in record:
            try:
                getattr(self._dynamodb, xform_name(record["ddb"]))(**record["p"])
            except ClientError:
                return False
            return True
        key = record["key"]
        if record["s3"] == "put":
            self._s3.put_object(Bucket=record["bucket"], Key=key, Body=base64.b64decode(record["body"]))
        else:
            self._s3.delete_object(Bucket=record["bucket"], Key=key)
        return True

    # --- snapshot ---------------------------------------------------------------------------

    def _compact(self) -> None:
        """A snapshot of generation g+1, then a fresh journal of g+1. Called holding the
        request lock, so nothing changes between the two."""
        items: list[dict[str, Any]] = []
        for page in self._dynamodb.get_paginator("scan").paginate(TableName=self._table):
            items.extend(page.get("Items", []))
        objects = self._objects(self._bucket)
        buckets = {bucket: self._objects(bucket) for bucket in self._more_buckets}
        generation = self._generation + 1
        _replace(
            self._dir / SNAPSHOT,
            json.dumps({"generation": generation, "items": items, "objects": objects, "buckets": buckets}),
        )
        # A crash here leaves snapshot g+1 and journal g: the journal is then ignored, rightly.
        self._close_journal()
        _replace(self._dir / JOURNAL, json.dumps({"generation": generation}) + "\n")
        self._generation = generation
        self._journal_fd = os.open(self._dir / JOURNAL, os.O_WRONLY | os.O_APPEND)
        self._lines = 0

    def _objects(self, bucket: str) -> dict[str, str]:
        objects = {}
        for listing in self._s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for obj in listing.get("Contents", []):
                body = self._s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
                objects[obj["Key"]] = base64.b64encode(body).decode()
        return objects

    def _close_journal(self) -> None:
        if self._journal_fd is not None:
            os.close(self._journal_fd)
            self._journal_fd = None

    # --- journaling (inside the request lock) -----------------------------------------------

    def _observe(self, request: Any) -> "serial.Completion | None":
        """Before moto serves `request`: a callback that journals it once it succeeded, if it
        changes the table or the bucket."""
        parts = urlsplit(request.url)
        host = parts.hostname or ""
        if host.startswith(_DYNAMODB_HOST):
            target = request.headers.get("X-Amz-Target", b"")
            operation = (target.decode() if isinstance(target, bytes) else target).rpartition(".")[2]
            if operation not in _DYNAMODB_WRITES:
                return None
            body = request.body
            text = body.decode() if isinstance(body, bytes) else str(body)
            # botocore's JSON has no raw newline; the line is built around it without parsing it again.
            line = '{"ddb":' + json.dumps(operation) + ',"p":' + text.replace("\n", " ") + "}\n"
            return lambda status: self._append(line) if status < 300 else None
        if request.method not in _S3_WRITES or ".s3." not in f".{host}":
            return None
        located = _s3_location(host, parts.path)
        if located is None or located[0] not in (self._bucket, *self._more_buckets):
            return None
        bucket, key = located
        if not key and request.method == "POST" and "delete" in parse_qs(parts.query, keep_blank_values=True):
            # DeleteObjects (`aws s3 rm --recursive`, `sync --delete`): each key it names.
            body = request.body if isinstance(request.body, bytes) else str(request.body or "").encode()
            keys = [html.unescape(k.decode()) for k in re.findall(rb"<Key>(.*?)</Key>", body, re.DOTALL)]
            return lambda status: self._journal_objects(bucket, keys) if status < 300 else None
        if not key:
            return None
        return lambda status: self._journal_object(bucket, key) if status < 300 else None

    def _journal_objects(self, bucket: str, keys: list[str]) -> None:
        for key in keys:
            self._journal_object(bucket, key)

    def _journal_object(self, bucket: str, key: str) -> None:
        # The runtime's own read, not the writing function's: its role may neither read what it
        # wrote nor learn (s3:ListBucket) that a key it deleted is gone.
        with running_as(None):
            try:
                body: bytes | None = self._s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            except self._s3.exceptions.NoSuchKey:
                body = None
        record = (
            {"s3": "delete", "bucket": bucket, "key": key}
            if body is None
            else {"s3": "put", "bucket": bucket, "key": key, "body": base64.b64encode(body).decode()}
        )
        self._append(json.dumps(record) + "\n")

    def _append(self, line: str) -> None:
        if self._journal_fd is None:
            return
        data = line.encode()
        view = memoryview(data)
        while view:
            view = view[os.write(self._journal_fd, view) :]
        self._lines += 1
        if self._lines >= self.compact_after_lines:
            self._compact()


def _s3_location(host: str, path: str) -> tuple[str, str] | None:
    """(bucket, key) of an S3 request, virtual-hosted or path style."""
    if host.startswith("s3.") or host.startswith("s3-"):
        bucket, _, key = path.lstrip("/").partition("/")
    else:
        bucket, key = host.partition(".s3.")[0], path.lstrip("/")
    return (unquote(bucket), unquote(key)) if bucket else None


def _replace(path: Path, text: str) -> None:
    """Write `path` whole or not at all: a temporary file, fsynced, renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself, on file systems that need it
        finally:
            os.close(fd)
