"""The one rule both stores apply to a refused write: a lost race, or an error to raise."""

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from tests.dynamo_faults import cancellation_body, error_body, refused
from toolpipe.shared.dynamo import lost_race

# Two items: DynamoDB gives a transaction one reason per item.
TWO_CHECKS = [
    {
        "ConditionCheck": {
            "TableName": "t",
            "Key": {"pk": {"S": key}},
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }
    for key in ("a", "b")
]


@pytest.fixture
def client() -> Any:
    """A real client whose refusals are answered before anything is sent; were one not, it would
    fail on a closed local port, never reach AWS."""
    return boto3.client("dynamodb", region_name="us-east-1", endpoint_url="http://127.0.0.1:9")


def _aws_cancelled(client: Any, *codes: str) -> ClientError:
    with (
        refused(client, "TransactWriteItems", cancellation_body(*codes)),
        pytest.raises(ClientError) as raised,
    ):
        client.transact_write_items(TransactItems=TWO_CHECKS[: len(codes) or 1])
    return raised.value


@pytest.mark.parametrize(
    "codes",
    [("ConditionalCheckFailed",), ("None", "ConditionalCheckFailed"), ("ConditionalCheckFailed",) * 2],
)
def test_a_transaction_cancelled_only_by_false_conditions_lost_a_race(
    client: Any, codes: tuple[str, ...]
) -> None:
    assert lost_race(_aws_cancelled(client, *codes))


@pytest.mark.parametrize(
    "codes",
    [
        ("ThrottlingError",),
        ("None", "TransactionConflict"),
        ("ProvisionedThroughputExceeded",),
        ("ValidationError",),
        ("None", "ItemCollectionSizeLimitExceeded"),
        # A false condition beside a throttled item: tried again, the condition alone answers.
        ("ConditionalCheckFailed", "ThrottlingError"),
        ("TransactionConflict", "ConditionalCheckFailed"),
        (),  # no reasons at all: nothing says a condition was false
    ],
)
def test_a_transaction_cancelled_for_anything_else_did_not(client: Any, codes: tuple[str, ...]) -> None:
    error = _aws_cancelled(client, *codes)
    assert error.response["Error"]["Code"] == "TransactionCanceledException"
    assert not lost_race(error)


@pytest.mark.parametrize(
    ("code", "lost"),
    [
        ("ConditionalCheckFailedException", True),
        ("ProvisionedThroughputExceededException", False),
        ("ThrottlingException", False),
        ("ValidationException", False),
    ],
)
def test_a_single_write_lost_a_race_only_when_its_condition_failed(
    client: Any, code: str, lost: bool
) -> None:
    with refused(client, "PutItem", error_body(code, "refused")), pytest.raises(ClientError) as raised:
        client.put_item(
            TableName="t", Item={"pk": {"S": "a"}}, ConditionExpression="attribute_not_exists(pk)"
        )
    assert lost_race(raised.value) is lost


@pytest.fixture
def moto_table() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        client.put_item(TableName="t", Item={"pk": {"S": "b"}})
        yield client


def test_moto_s_false_condition_in_a_transaction_is_a_lost_race_shaped_as_aws_s(
    moto_table: Any, client: Any
) -> None:
    with pytest.raises(ClientError) as raised:
        moto_table.transact_write_items(TransactItems=TWO_CHECKS)  # "b" exists: its check fails
    assert lost_race(raised.value)
    # The refusals the other tests make up have the shape moto gives: reasons, in item order.
    made_up = _aws_cancelled(client, "None", "ConditionalCheckFailed")
    moto_reasons: Any = dict(raised.value.response)["CancellationReasons"]
    assert (
        moto_reasons
        == dict(made_up.response)["CancellationReasons"]
        == [
            {"Code": "None"},
            {"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"},
        ]
    )


def test_moto_s_false_condition_on_one_item_is_a_lost_race(moto_table: Any) -> None:
    with pytest.raises(ClientError) as raised:
        moto_table.put_item(
            TableName="t", Item={"pk": {"S": "b"}}, ConditionExpression="attribute_not_exists(pk)"
        )
    assert lost_race(raised.value)
