"""How long an ended run is kept, and how a run is removed at once.

The rule (README "Retention"): nothing of a run expires while it runs, or waits for a person or
a program, however long that takes. When it ends, every item of the run (its partition on the
table, and its approvals' records and task tokens) gets the same DynamoDB TTL, `retain_until`
= the end + `retention_days`, and each of its objects under `runs/<id>/` gets the tag
`RETENTION_TAG`, which the contents bucket's lifecycle rule expires `retention_days` after the
object was written (so at once if that was longer ago). Whatever is written into an ended run
later (a call that was still running when the run was cancelled) is stamped by its writer, and
whatever is written into a run deleted meanwhile expires `retention_days` after it was written
(`after_write`). A resume makes the run run again: it takes all of that back (`keep_run`), and
the next ending stamps the run anew.

`retain_until`, not `expires_at`: an approval's record already holds an `expires_at` (its
deadline, as ISO text). TTL ignores an attribute that is not a number, but one name, one meaning.
"""

import contextvars
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.exceptions import ClientError

from toolpipe.shared.dynamo import lost_race, run_pk

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table
    from mypy_boto3_s3.client import S3Client

# The table's TTL attribute (epoch seconds, a number); the stack declares the same name.
RETAIN_UNTIL = "retain_until"
DEFAULT_RETENTION_DAYS = 30
# DynamoDB's TTL and S3's lifecycle both count in whole days here; ten years is plenty.
MAX_RETENTION_DAYS = 3650
# The tag an ended run's objects carry; the contents bucket's lifecycle rule expires tagged objects.
RETENTION_TAG_KEY = "toolpipe-retention"
RETENTION_TAG_VALUE = "expire"
# Where a run's objects live in the contents bucket (shared/history/store.py writes them).
RUN_OBJECTS_PREFIX = "runs/"
# BatchWriteItem takes at most 25 requests; DeleteObjects at most 1,000 keys.
BATCH_WRITE_MAX = 25
DELETE_OBJECTS_MAX = 1000
# Items stamped at once when a run ends (10,000 items at ~5 ms a write: ~3 s).
STAMP_THREADS = 16
# Backoff between retries of what a batch left unprocessed (throttling); then it is an error.
RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)

T = TypeVar("T")


def run_prefix(run_id: str) -> str:
    return f"{RUN_OBJECTS_PREFIX}{run_id}/"


def retain_until(days: int, now: float | None = None) -> int:
    """The TTL of an ended run's items: `days` after `now` (the end), in epoch seconds."""
    return int(now if now is not None else time.time()) + days * 86_400


def expired(until: int | None, now: float | None = None) -> bool:
    """Whether an ended run stamped `until` has passed it: DynamoDB may be deleting its items."""
    return until is not None and until <= (now if now is not None else time.time())


def _approval_keys(approval_id: str) -> list[dict[str, str]]:
    # shared/deferred/store.py: the record and the task token, outside the run's partition.
    return [{"pk": f"APPROVAL#{approval_id}", "sk": sk} for sk in ("APPROVAL", "TOKEN")]


def partition(table: "Table", run_id: str) -> Iterator[dict[str, Any]]:
    """Every item of the run's partition: its keys, its stamp and (a gate) its approval id."""
    kwargs: dict[str, Any] = {
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": run_pk(run_id)},
        "ProjectionExpression": "pk, sk, approval_id, #r",
        "ExpressionAttributeNames": {"#r": RETAIN_UNTIL},
        "ConsistentRead": True,
    }
    while True:
        page = table.query(**kwargs)
        yield from page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def ended_stamp(table: "Table", run_id: str) -> tuple[bool, int | None]:
    """(whether the run record exists, its `retain_until`: set once the run has ended)."""
    item = table.get_item(
        Key={"pk": run_pk(run_id), "sk": "META"},
        ProjectionExpression="pk, #r",
        ExpressionAttributeNames={"#r": RETAIN_UNTIL},
        ConsistentRead=True,
    ).get("Item")
    return record_state(item)


def stamp(table: "Table", keys: Iterable[dict[str, Any]], until: int) -> None:
    """Set `retain_until` on each existing item (one that is gone stays gone), a few at once:
    a run's end (a cancel among them, inside the API's 29 seconds) stamps all of its items."""
    _update_each(table, [(key, "SET #r = :v", "attribute_exists(pk)", until) for key in keys])


def _unstamp(table: "Table", stamped: list[tuple[dict[str, Any], int | None]]) -> None:
    """Remove `retain_until` from each item that still holds the stamp it was read with (one
    gone, never stamped or stamped anew by a later ending is left as it is)."""
    _update_each(table, [(key, "REMOVE #r", "#r = :v", seen) for key, seen in stamped])


def _update_each(table: "Table", updates: list[tuple[dict[str, Any], str, str, int | None]]) -> None:
    """Each (key, update of `#r` = `retain_until`, condition, value `:v`), a few at once when
    there are many; one whose condition is false changes nothing and is no error."""
    client: Any = table.meta.client  # thread-safe, unlike the resource; takes plain values

    def one(update: tuple[dict[str, Any], str, str, int | None]) -> None:
        key, expression, condition, value = update
        try:
            client.update_item(
                TableName=table.name,
                Key=key,
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeNames={"#r": RETAIN_UNTIL},
                ExpressionAttributeValues={":v": value},
            )
        except ClientError as e:
            if not lost_race(e):
                raise

    _each(one, updates)


def _each(write: Callable[[T], None], items: list[T]) -> None:
    """`write` each item, a few at once when there are many (10,000 at ~5 ms each: ~3 s)."""
    if len(items) <= STAMP_THREADS:  # a few: threads would cost more than they save
        for item in items:
            write(item)
        return
    # Each write in a copy of the caller's context: the run's cost meter (shared/costs) counts it.
    contexts = [contextvars.copy_context() for _ in items]
    with ThreadPoolExecutor(max_workers=STAMP_THREADS) as pool:
        # The first error, if any, is raised here.
        list(pool.map(lambda c, i: c.run(write, i), contexts, items))


def run_objects(s3: "S3Client", bucket: str, run_id: str) -> Iterator[str]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=run_prefix(run_id)):
        for item in page.get("Contents", []):
            yield item["Key"]


def expire_run(table: "Table", s3: "S3Client", bucket: str, run_id: str, until: int) -> None:
    """Give every item and object of an ended run its expiry. Idempotent: an item already
    stamped is not written again, so a retry after a crash writes only what is left."""
    items, gates = _items_and_gates(table, run_id, lambda stamped: stamped != until)
    stamp(table, [key for gate in gates for key in _approval_keys(str(gate["approval_id"]))], until)
    stamp(table, [{"pk": item["pk"], "sk": item["sk"]} for item in (*items, *gates)], until)
    tagging: Any = {"TagSet": [{"Key": RETENTION_TAG_KEY, "Value": RETENTION_TAG_VALUE}]}
    _each_object(
        s3, bucket, run_id, lambda key: s3.put_object_tagging(Bucket=bucket, Key=key, Tagging=tagging)
    )
    _settle(table, s3, bucket, run_id, until)


def keep_run(table: "Table", s3: "S3Client", bucket: str, run_id: str) -> None:
    """Take back the expiry an ending gave the items and objects of a run that runs again (a
    resume): nothing of a running run expires. Each item loses only the stamp it was read with,
    so a stamp a later ending writes meanwhile stays; that ending's tags are written again at
    the end (`_settle`)."""
    items, gates = _items_and_gates(table, run_id, lambda stamped: stamped is not None)
    _unstamp(
        table, [(key, _stamp_of(gate)) for gate in gates for key in _approval_keys(str(gate["approval_id"]))]
    )
    _unstamp(table, [({"pk": item["pk"], "sk": item["sk"]}, _stamp_of(item)) for item in (*items, *gates)])
    # Untagged, the bucket's rule does not expire them.
    _each_object(s3, bucket, run_id, lambda key: s3.delete_object_tagging(Bucket=bucket, Key=key))
    _settle(table, s3, bucket, run_id, None)


def _items_and_gates(
    table: "Table", run_id: str, wanted: Callable[[int | None], bool]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The run's items but its record whose stamp is `wanted`, and apart from them its gates
    (a call's approval, whose record and token live outside the partition). Both an ending and
    a take-back write an approval's items before its gate, so a gate written means all three
    are, and a retry that skips it skips nothing left to do."""
    items: list[dict[str, Any]] = []
    gates: list[dict[str, Any]] = []
    for item in partition(table, run_id):
        if item["sk"] != "META" and wanted(_stamp_of(item)):
            (gates if "approval_id" in item else items).append(item)
    return items, gates


def _each_object(s3: "S3Client", bucket: str, run_id: str, call: Callable[[str], object]) -> None:
    """`call` for each of the run's objects, a few at once; one gone meanwhile (a delete) is skipped."""

    def one(key: str) -> None:
        try:
            call(key)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") not in ("NoSuchKey", "404"):
                raise

    _each(one, list(run_objects(s3, bucket, run_id)))


def _settle(table: "Table", s3: "S3Client", bucket: str, run_id: str, wrote: int | None) -> None:
    """After an ending wrote its stamp `wrote` on the run's items and objects, or a resume took
    them back (None): the record read again. A resume or another ending that came meanwhile may
    have written its own before this one's last writes (S3's tags are not conditional), so what
    the record now says is written again; unchanged, nothing is."""
    exists, now = ended_stamp(table, run_id)
    if not exists or now == wrote:
        return
    if now is None:
        keep_run(table, s3, bucket, run_id)
    else:
        expire_run(table, s3, bucket, run_id, now)


def _stamp_of(item: dict[str, Any]) -> int | None:
    value = item.get(RETAIN_UNTIL)
    return None if value is None else int(str(value))


def record_state(item: dict[str, Any] | None) -> tuple[bool, int | None]:
    """(whether the run record exists, its `retain_until`) from the record as a write answered
    it (`ALL_NEW`, or `ALL_OLD` in a refusal, where the values are typed: `{"N": "..."}`)."""
    if item is None:
        return False, None
    value = item.get(RETAIN_UNTIL)
    if isinstance(value, dict):
        value = value.get("N")
    return True, None if value is None else int(str(value))


def delete_run(table: "Table", s3: "S3Client", bucket: str, run_id: str) -> None:
    """Remove every object and item of the run, its record last: a delete that dies half-way
    leaves a run that is still there, and deleting it again removes the rest."""
    keys: list[str] = list(run_objects(s3, bucket, run_id))
    for start in range(0, len(keys), DELETE_OBJECTS_MAX):
        chunk = keys[start : start + DELETE_OBJECTS_MAX]
        answer = s3.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True}
        )
        if answer.get("Errors"):
            first = answer["Errors"][0]
            raise RuntimeError(
                f"S3 kept {len(answer['Errors'])} objects of run {run_id}: {first.get('Code')} on {first.get('Key')}"
            )
    items: list[dict[str, Any]] = []
    for item in partition(table, run_id):
        if item["sk"] == "META":
            continue
        if "approval_id" in item:
            items += _approval_keys(str(item["approval_id"]))
        items.append({"pk": item["pk"], "sk": item["sk"]})
    batch_delete(table, items)
    table.delete_item(Key={"pk": run_pk(run_id), "sk": "META"})


def batch_delete(table: "Table", keys: list[dict[str, Any]]) -> None:
    """Delete the items, 25 a request, retrying what DynamoDB leaves unprocessed."""
    client: Any = table.meta.client  # plain Python values, as the table resource takes them
    for start in range(0, len(keys), BATCH_WRITE_MAX):
        pending: dict[str, Any] = {
            table.name: [{"DeleteRequest": {"Key": key}} for key in keys[start : start + BATCH_WRITE_MAX]]
        }
        for delay in (*RETRY_DELAYS, None):
            pending = client.batch_write_item(RequestItems=pending).get("UnprocessedItems", {})
            if not pending:
                break
            if delay is None:
                left = sum(len(v) for v in pending.values())
                raise RuntimeError(f"DynamoDB left {left} items unprocessed (throttled past every retry)")
            time.sleep(delay)


def after_write(
    table: "Table",
    s3: "S3Client",
    bucket: str,
    run_id: str,
    written: tuple[list[dict[str, Any]], list[str]],
    days: int,
    record: tuple[bool, int | None] | None = None,
) -> None:
    """What a write into a run that may have ended (or been deleted) since its writer last read
    it does next: one consistent read of the run record, and nothing more while it runs. In an
    ended run, everything is stamped again (what was just written included). Without a record
    (the run was deleted meanwhile), what was just written, `written` (item keys, object keys),
    expires `days` from now: the delete that missed it cannot be repeated (the run is gone).

    `record`: what that read would answer, (whether the record exists, its `retain_until`), as
    a write to the record made after `written` answered it: a run's end writes its stamp on the
    record before it reads which items to stamp, so a record that holds none then has an end
    still to come, which will find what was written."""
    exists, until = record if record is not None else ended_stamp(table, run_id)
    if exists and until is not None:
        expire_run(table, s3, bucket, run_id, until)
    elif not exists:
        keys, objects = written
        stamp(table, keys, retain_until(days))
        for key in objects:
            s3.put_object_tagging(
                Bucket=bucket,
                Key=key,
                Tagging={"TagSet": [{"Key": RETENTION_TAG_KEY, "Value": RETENTION_TAG_VALUE}]},
            )
