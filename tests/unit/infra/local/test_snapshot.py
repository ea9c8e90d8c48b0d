"""The saved state read without moto: DynamoDB JSON as boto3's resource gives it, the reads the
stores make (and only those), and when the snapshot alone is the whole state."""

import base64
import json
from decimal import Decimal
from pathlib import Path

import pytest

from toolpipe.infra.local.snapshot import (
    Snapshot,
    SnapshotError,
    UnsupportedReadError,
    journal_pending,
)
from toolpipe.shared.dynamo import CALLER_INDEX, CALLER_INDEX_PK, CALLER_INDEX_SK


def _save(path: Path, items: list[dict[str, object]], objects: dict[str, bytes] | None = None) -> Path:
    encoded = {k: base64.b64encode(v).decode() for k, v in (objects or {}).items()}
    path.write_text(json.dumps({"generation": 4, "items": items, "objects": encoded, "buckets": {}}))
    return path


def _item(pk: str, sk: str, **more: dict[str, object]) -> dict[str, object]:
    return {"pk": {"S": pk}, "sk": {"S": sk}, **more}


def test_values_come_back_as_the_boto3_resource_gives_them(tmp_path: Path) -> None:
    typed = {
        "n": {"N": "7.5"},
        "flag": {"BOOL": False},
        "none": {"NULL": True},
        "m": {"M": {"l": {"L": [{"S": "a"}, {"N": "1"}]}}},
        "ss": {"SS": ["x", "y"]},
        "ns": {"NS": ["1", "2"]},
        "b": {"B": base64.b64encode(b"\x00\x01").decode()},
    }
    snapshot = Snapshot.load(_save(tmp_path / "state.json", [_item("RUN#a", "META", **typed)]))

    item = snapshot.table("t").get_item(Key={"pk": "RUN#a", "sk": "META"})["Item"]

    assert item["n"] == Decimal("7.5") and isinstance(item["n"], Decimal)
    assert (item["flag"], item["none"], item["b"]) == (False, None, b"\x00\x01")
    assert item["m"] == {"l": ["a", Decimal(1)]}
    assert (item["ss"], item["ns"]) == ({"x", "y"}, {Decimal(1), Decimal(2)})
    assert snapshot.generation == 4
    assert snapshot.table("t").get_item(Key={"pk": "RUN#a", "sk": "NOPE"}) == {}


def test_a_query_reads_a_range_of_a_partition_in_key_order(tmp_path: Path) -> None:
    items = [_item("RUN#a", f"MSG#{seq:06d}") for seq in (3, 1, 2, 4)] + [
        _item("RUN#a", "META"),
        _item("RUN#b", "MSG#000002"),
    ]
    table = Snapshot.load(_save(tmp_path / "state.json", items)).table("t")

    page = table.query(
        KeyConditionExpression="pk = :pk AND sk BETWEEN :first AND :last",
        ExpressionAttributeValues={":pk": "RUN#a", ":first": "MSG#000002", ":last": "MSG#999999"},
        Limit=1,  # one page holds all: nothing to continue
    )

    assert [i["sk"] for i in page["Items"]] == ["MSG#000002", "MSG#000003", "MSG#000004"]
    assert "LastEvaluatedKey" not in page
    prefixed = table.query(
        KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
        ExpressionAttributeValues={":pk": "RUN#a", ":p": "ME"},
        ProjectionExpression="sk",
    )
    assert prefixed["Items"] == [{"sk": "META"}]


def test_the_caller_index_holds_only_items_with_its_keys_newest_first_by_utf8_bytes(tmp_path: Path) -> None:
    def indexed(pk: str, created: str, status: str) -> dict[str, object]:
        return _item(
            pk,
            "APPROVAL",
            **{
                CALLER_INDEX_PK: {"S": "APPROVALS#me"},
                CALLER_INDEX_SK: {"S": created},
                "status": {"S": status},
            },
        )

    items = [
        indexed("APPROVAL#1", "2026-01-01#1", "pending"),
        indexed("APPROVAL#2", "2026-01-02#\uffff", "approved"),
        indexed("APPROVAL#3", "2026-01-02#\U0001f600", "pending"),  # after U+FFFF, as in UTF-8
        _item("APPROVAL#4", "APPROVAL", status={"S": "pending"}),  # not in the index
    ]
    table = Snapshot.load(_save(tmp_path / "state.json", items)).table("t")

    page = table.query(
        IndexName=CALLER_INDEX,
        KeyConditionExpression=f"{CALLER_INDEX_PK} = :requester",
        FilterExpression="#status = :status",
        ExpressionAttributeNames={"#status": "status"},
        ExpressionAttributeValues={":requester": "APPROVALS#me", ":status": "pending"},
        ScanIndexForward=False,
    )

    assert [i["pk"] for i in page["Items"]] == ["APPROVAL#3", "APPROVAL#1"]
    scanned = table.scan(FilterExpression="sk = :record", ExpressionAttributeValues={":record": "APPROVAL"})
    assert len(scanned["Items"]) == 4


@pytest.mark.parametrize(
    "expression",
    ["pk = :pk OR sk = :sk", "attribute_exists(pk)", "pk = :pk AND", "pk < :pk", "pk = :pk sk = :sk"],
)
def test_a_read_it_was_not_taught_fails_loudly(tmp_path: Path, expression: str) -> None:
    table = Snapshot.load(_save(tmp_path / "state.json", [_item("RUN#a", "META")])).table("t")
    with pytest.raises(UnsupportedReadError):
        table.query(KeyConditionExpression=expression, ExpressionAttributeValues={":pk": "RUN#a", ":sk": "x"})
    with pytest.raises(UnsupportedReadError):
        table.query(
            KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": "x"}, IndexName="Other"
        )


def test_objects_are_read_from_the_content_bucket_only(tmp_path: Path) -> None:
    snapshot = Snapshot.load(_save(tmp_path / "state.json", [], {"runs/a/messages/000001.json": b"{}"}))
    bucket = snapshot.bucket("contents")
    assert bucket.get_object(Bucket="contents", Key="runs/a/messages/000001.json")["Body"].read() == b"{}"
    with pytest.raises(KeyError):
        bucket.get_object(Bucket="other", Key="runs/a/messages/000001.json")


@pytest.mark.parametrize(
    "text",
    [
        '{"generation": 1, "items": [',
        "[]",
        '{"items": [{"pk": {"X": "?"}}]}',
        '{"items": [{"pk": {"S": "a", "N": "1"}}]}',
        '{"items": [], "objects": {"k": "not base64!"}}',
        '{"generation": "one"}',
        '{"items": [{"sk": {"S": "META"}}]}',
        '{"items": [{"pk": {"N": "1"}, "sk": {"S": "META"}}]}',
        '{"generation": 1e400}',
        "[" * 100_000 + "]" * 100_000,
        '{"items": [{"pk": {"S": "a"}, "sk": {"S": "b"}, "x": ' + '{"L": [' * 400 + "{}" + "]}" * 400 + "}]}",
    ],
)
def test_a_file_that_is_not_a_saved_state_is_one_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "state.json").write_text(text)
    with pytest.raises(SnapshotError, match="is not a saved state"):
        Snapshot.load(tmp_path / "state.json")


@pytest.mark.parametrize(
    ("journal", "pending"),
    [
        (None, False),  # never journaled
        ('{"generation": 4}\n', False),  # a clean stop: the header alone
        ('{"generation": 4}\n{"ddb": "PutItem", "p": {}}\n', True),  # a crash's request
        ('{"generation": 4}\n{"ddb": "Put', True),  # torn mid-write: still the server's to judge
        ('{"generation": 3}\n{"ddb": "PutItem", "p": {}}\n', False),  # folded in already
        ("not json\n", True),  # damaged: the server keeps it aside and says so
    ],
)
def test_only_a_journal_of_the_snapshots_generation_with_requests_needs_a_server(
    tmp_path: Path, journal: str | None, pending: bool
) -> None:
    if journal is not None:
        (tmp_path / "journal.jsonl").write_text(journal)
    assert journal_pending(tmp_path, 4) is pending


def test_a_snapshot_that_cannot_be_read_is_one_error_and_a_missing_one_is_none_at_all(tmp_path: Path) -> None:
    (tmp_path / "state.json").mkdir()
    with pytest.raises(SnapshotError, match="cannot be read"):
        Snapshot.load(tmp_path / "state.json")
    with pytest.raises(FileNotFoundError):
        Snapshot.load(tmp_path / "absent.json")
