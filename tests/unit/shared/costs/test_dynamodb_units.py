"""Request units as DynamoDB bills them, from the items (its documented sizing rules)."""

import pytest

from toolpipe.shared.costs.dynamodb_units import item_size, units


def test_sizes_follow_dynamodbs_rules() -> None:
    # Names and string values in UTF-8 bytes; a number about a byte per two digits, plus one.
    assert item_size({"pk": {"S": "RUN#abc"}}) == 2 + 7
    assert item_size({"n": {"N": "12345"}}) == 1 + 4
    assert item_size({"é": {"S": "ü"}}) == 2 + 2
    assert item_size({"f": {"BOOL": True}, "z": {"NULL": True}}) == 2 + 2
    assert item_size({"m": {"M": {"a": {"S": "x"}}}}) == 1 + 3 + 1 + 1 + 1


def test_a_write_is_a_unit_per_kilobyte_and_a_transaction_twice() -> None:
    small = {"pk": {"S": "a"}}
    big = {"pk": {"S": "a"}, "data": {"S": "x" * 2500}}
    assert units("PutItem", {"Item": small}, {}) == (0, 1)
    assert units("PutItem", {"Item": big}, {}) == (0, 3)
    assert units(
        "TransactWriteItems", {"TransactItems": [{"Put": {"Item": big}}, {"Put": {"Item": small}}]}, {}
    ) == (
        0,
        2 * (3 + 1),
    )


def test_a_read_is_a_unit_per_4_kb_and_half_when_eventually_consistent() -> None:
    item = {"pk": {"S": "a"}, "data": {"S": "x" * 5000}}
    assert units("GetItem", {"ConsistentRead": True}, {"Item": item}) == (2.0, 0)
    assert units("GetItem", {}, {"Item": item}) == (1.0, 0)
    # A miss still costs the minimum.
    assert units("GetItem", {}, {}) == (0.5, 0)
    # A query is billed on the sum of its items, rounded up once.
    three = {"Items": [{"pk": {"S": "a"}, "d": {"S": "x" * 1500}}] * 3}
    assert units("Query", {"ConsistentRead": True}, three) == (2.0, 0)


def test_an_update_is_billed_on_the_item_it_returned() -> None:
    after = {"pk": {"S": "a"}, "data": {"S": "x" * 3000}}
    assert units("UpdateItem", {"Key": {"pk": {"S": "a"}}}, {"Attributes": after}) == (0, 3)


@pytest.mark.parametrize(
    ("code", "expected"),
    [("ConditionalCheckFailedException", (0, 1)), ("ProvisionedThroughputExceededException", (0, 0))],
)
def test_a_refused_write_costs_what_dynamodb_bills_for_it(code: str, expected: tuple[float, int]) -> None:
    assert units("PutItem", {"Item": {"pk": {"S": "a"}}}, {"Error": {"Code": code}}) == expected


def test_a_batch_write_does_not_bill_what_came_back_unprocessed() -> None:
    put = {"PutRequest": {"Item": {"pk": {"S": "a"}}}}
    params = {"RequestItems": {"t": [put, put, {"DeleteRequest": {"Key": {"pk": {"S": "b"}}}}]}}
    assert units("BatchWriteItem", params, {"UnprocessedItems": {"t": [put]}}) == (0, 2)
