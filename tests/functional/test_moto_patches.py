"""moto's Step Functions interpreter, patched by the local runtime: cached clients and JSONPath
parsers (the e2e suite runs the state machine through them), and the early-answer race."""

import copy
import json
import time
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.dynamodb.models.table import Table
from moto.dynamodb.responses import DynamoResult
from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackEndpoint, CallbackOutcomeSuccess
from moto.stepfunctions.parser.asl.utils import boto_client, json_path

from toolpipe.infra.local import moto_patches

moto_patches.install()


def test_a_heartbeat_sent_before_the_task_starts_its_clock_is_accepted() -> None:
    # A worker woken by the send heartbeats at once, before the task reached its wait.
    assert CallbackEndpoint("token").notify_heartbeat()


def test_an_answer_that_arrives_before_the_heartbeat_clock_ends_the_wait_at_once() -> None:
    endpoint = CallbackEndpoint("token")
    endpoint.notify(CallbackOutcomeSuccess(callback_id="token", output="{}"))
    heartbeat = endpoint.setup_heartbeat_endpoint(heartbeat_seconds=2)
    # Unpatched, this waits the whole heartbeat timeout and reports it timed out.
    assert heartbeat.clear_and_wait()


def test_the_interpreter_builds_one_client_per_service_and_region() -> None:
    with mock_aws():
        first = boto_client.boto_client_for("us-east-1", "sqs")
        assert first is boto_client.boto_client_for("us-east-1", "sqs")
        assert first is not boto_client.boto_client_for("us-east-1", "lambda")
        queue = boto3.client("sqs", region_name="us-east-1").create_queue(QueueName="q")["QueueUrl"]
        first.send_message(QueueUrl=queue, MessageBody="through the cached client")
        assert boto3.client("sqs", region_name="us-east-1").receive_message(QueueUrl=queue)["Messages"]


def test_a_jsonpath_expression_is_parsed_once_and_still_evaluates() -> None:
    assert json_path.parse("$.call.seq") is json_path.parse("$.call.seq")
    assert json_path.extract_json("$.call.seq", {"call": {"seq": 7}}) == 7


def _slow_to_parse_machine() -> tuple[Any, str]:
    """A state machine long enough to parse (as the run flow's is) that a request made right
    after StartExecution comes before the execution's interpreter state exists."""
    states: dict[str, Any] = {f"Pass{n}": {"Type": "Pass", "Next": f"Pass{n + 1}"} for n in range(200)}
    states["Pass200"] = {"Type": "Wait", "Seconds": 60, "End": True}
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    machine = sfn.create_state_machine(
        name="m",
        definition=json.dumps({"StartAt": "Pass0", "States": states}),
        roleArn="arn:aws:iam::123456789012:role/r",
    )["stateMachineArn"]
    return sfn, machine


def test_an_execution_stopped_right_after_it_started_ends_aborted() -> None:
    # A run cancelled as soon as it started: the stop arrives before the interpreter's thread
    # built its state. Unpatched, StopExecution raised there (the API answered 500).
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        sfn, machine = _slow_to_parse_machine()
        for n in range(5):
            execution = sfn.start_execution(stateMachineArn=machine, name=f"e{n}")["executionArn"]
            sfn.stop_execution(executionArn=execution, cause="cancelled")
            # moto reflects the stop when the interpreter's thread ends, a moment later.
            deadline = time.monotonic() + 5
            while (status := sfn.describe_execution(executionArn=execution)["status"]) == "RUNNING":
                assert time.monotonic() < deadline, "the stopped execution still runs"
                time.sleep(0.01)
            assert status == "ABORTED"


# --- DynamoDB: the same answers, without the per-request costs ----------------------------------


def _table(client: Any) -> None:
    client.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )


EVERY_TYPE = {
    "pk": {"S": "run"},
    "sk": {"S": "MSG#1"},
    "n": {"N": "12.50"},
    "b": {"B": b"\x00\xffbytes"},
    "ss": {"SS": ["a", "b"]},
    "ns": {"NS": ["1", "2.5"]},
    "bs": {"BS": [b"x", b"y"]},
    "l": {"L": [{"S": "x"}, {"N": "1"}, {"NULL": True}, {"M": {"deep": {"BOOL": False}}}]},
    "m": {"M": {"k": {"S": "ü ✓ \u2028"}, "empty": {"M": {}}}},
    "null": {"NULL": True},
    "bool": {"BOOL": True},
}


def test_dynamodb_item_answers_are_the_serializers_byte_for_byte_in_meaning(monkeypatch: Any) -> None:
    compared: list[str] = []

    def both(self: DynamoResult, context: Any) -> Any:
        fast = moto_patches._execute_result_as_built(self, context)
        slow = moto_patches._serialize_result(self, context)
        assert (fast[0], json.loads(fast[2])) == (slow[0], json.loads(slow[2])), context.operation_model.name
        assert fast[1]["Content-Type"] == slow[1]["Content-Type"]
        compared.append(context.operation_model.name)
        return fast

    monkeypatch.setattr(DynamoResult, "execute_result", both)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        _table(client)
        client.put_item(TableName="t", Item=EVERY_TYPE, ReturnValues="NONE")
        client.put_item(TableName="t", Item={**EVERY_TYPE, "n": {"N": "3"}}, ReturnValues="ALL_OLD")
        assert client.get_item(TableName="t", Key={"pk": {"S": "run"}, "sk": {"S": "MSG#1"}})["Item"][
            "b"
        ] == {"B": b"\x00\xffbytes"}
        client.get_item(TableName="t", Key={"pk": {"S": "run"}, "sk": {"S": "nothing"}})
        client.update_item(
            TableName="t",
            Key={"pk": {"S": "run"}, "sk": {"S": "MSG#1"}},
            UpdateExpression="ADD n :one SET extra = :e",
            ExpressionAttributeValues={":one": {"N": "1"}, ":e": {"S": "x"}},
            ReturnValues="ALL_NEW",
        )
        for i in range(2, 6):
            client.put_item(TableName="t", Item={"pk": {"S": "run"}, "sk": {"S": f"MSG#{i}"}})
        page = client.query(
            TableName="t",
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "run"}},
            Limit=2,
            ReturnConsumedCapacity="TOTAL",
        )
        assert page["LastEvaluatedKey"] and len(page["Items"]) == 2
        client.scan(TableName="t", Select="COUNT")
        client.transact_write_items(
            TransactItems=[{"Put": {"TableName": "t", "Item": {"pk": {"S": "run"}, "sk": {"S": "T"}}}}]
        )
        client.transact_get_items(
            TransactItems=[{"Get": {"TableName": "t", "Key": {"pk": {"S": "run"}, "sk": {"S": "T"}}}}]
        )
        client.batch_get_item(RequestItems={"t": {"Keys": [{"pk": {"S": "run"}, "sk": {"S": "T"}}]}})
        client.delete_item(TableName="t", Key={"pk": {"S": "run"}, "sk": {"S": "T"}}, ReturnValues="ALL_OLD")
    assert {"PutItem", "GetItem", "UpdateItem", "Query", "Scan", "TransactGetItems", "DeleteItem"} <= set(
        compared
    )


def test_a_failed_transaction_leaves_every_item_as_it_was_and_copies_no_table() -> None:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        _table(client)
        for i in range(50):
            client.put_item(TableName="t", Item={"pk": {"S": "other"}, "sk": {"S": f"{i}"}, "v": {"N": "0"}})
        client.put_item(TableName="t", Item={"pk": {"S": "run"}, "sk": {"S": "A"}, "v": {"N": "1"}})
        before = client.scan(TableName="t")["Items"]
        with pytest.raises(client.exceptions.TransactionCanceledException):
            client.transact_write_items(
                TransactItems=[
                    {  # applied first, then undone
                        "Update": {
                            "TableName": "t",
                            "Key": {"pk": {"S": "run"}, "sk": {"S": "A"}},
                            "UpdateExpression": "SET v = :two",
                            "ExpressionAttributeValues": {":two": {"N": "2"}},
                        }
                    },
                    {
                        "Put": {"TableName": "t", "Item": {"pk": {"S": "run"}, "sk": {"S": "B"}}}
                    },  # new, undone
                    {
                        "Put": {
                            "TableName": "t",
                            "Item": {"pk": {"S": "other"}, "sk": {"S": "1"}},
                            "ConditionExpression": "attribute_not_exists(pk)",  # fails
                        }
                    },
                ]
            )
        assert client.scan(TableName="t")["Items"] == before
        # A transaction that succeeds still writes all of it.
        client.transact_write_items(
            TransactItems=[{"Put": {"TableName": "t", "Item": {"pk": {"S": "run"}, "sk": {"S": "B"}}}}]
        )
        assert len(client.scan(TableName="t")["Items"]) == len(before) + 1


def test_a_transaction_copies_the_items_it_names_not_the_table(monkeypatch: Any) -> None:
    copies: list[Any] = []
    real = copy.deepcopy

    def counting(value: Any, memo: Any = None) -> Any:
        copies.append(type(value).__name__)
        return real(value, memo)

    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        _table(client)
        for i in range(200):
            client.put_item(TableName="t", Item={"pk": {"S": "other"}, "sk": {"S": f"{i}"}})
        monkeypatch.setattr(copy, "deepcopy", counting)
        client.transact_write_items(
            TransactItems=[{"Put": {"TableName": "t", "Item": {"pk": {"S": "run"}, "sk": {"S": "B"}}}}]
        )
    # Unpatched, the table and each of its 200 items were copied.
    assert "Table" not in copies and copies.count("Item") <= 2


def test_a_query_reads_its_partition_alone_and_answers_as_before(monkeypatch: Any) -> None:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        _table(client)
        for pk in ("a", "b", "c"):
            for i in range(30):
                client.put_item(
                    TableName="t", Item={"pk": {"S": pk}, "sk": {"S": f"MSG#{i:03d}"}, "v": {"N": str(i)}}
                )
        looked_at: list[int] = []
        real = moto_patches._items_of_partition

        def counting(self: Table) -> Any:
            found = real(self)
            looked_at.append(len(found))
            return found

        monkeypatch.setattr(Table, "all_items", counting)
        pages, start = [], None
        while True:
            extra = {"ExclusiveStartKey": start} if start else {}
            page = client.query(
                TableName="t",
                KeyConditionExpression="pk = :p AND sk > :after",
                ExpressionAttributeValues={":p": {"S": "b"}, ":after": {"S": "MSG#009"}},
                ScanIndexForward=False,
                Limit=7,
                **extra,
            )
            pages.append([int(i["v"]["N"]) for i in page["Items"]])
            start = page.get("LastEvaluatedKey")
            if not start:
                break
        assert [v for page in pages for v in page] == list(range(29, 9, -1))
        assert (
            client.query(
                TableName="t", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "zz"}}
            )["Items"]
            == []
        )
        between = client.query(
            TableName="t",
            KeyConditionExpression="pk = :p AND sk BETWEEN :a AND :b",
            ExpressionAttributeValues={":p": {"S": "c"}, ":a": {"S": "MSG#005"}, ":b": {"S": "MSG#007"}},
        )["Items"]
        assert [int(i["v"]["N"]) for i in between] == [5, 6, 7]
        prefixed = client.query(
            TableName="t",
            KeyConditionExpression="pk = :p AND begins_with(sk, :s)",
            ExpressionAttributeValues={":p": {"S": "a"}, ":s": {"S": "MSG#02"}},
        )["Items"]
        assert [int(i["v"]["N"]) for i in prefixed] == list(range(20, 30))
        assert set(looked_at) <= {
            20,
            10,
            3,
            0,
        }  # the 20 its condition admits: not the partition's 30 or the table's 90
        assert len(client.scan(TableName="t")["Items"]) == 90  # a scan still sees every item


def test_a_task_answer_passes_over_an_execution_that_has_just_started() -> None:
    # An execution without interpreter state yet holds no token; moto read its state anyway
    # and every SendTask* raised (a worker's answer, a person's approval: 500s).
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        sfn, machine = _slow_to_parse_machine()
        for n in range(5):
            execution = sfn.start_execution(stateMachineArn=machine, name=f"e{n}")["executionArn"]
            # No execution holds this token: the answer AWS gives, not a server error.
            with pytest.raises(sfn.exceptions.InvalidToken):
                sfn.send_task_success(taskToken="no-such-token", output="{}")
            sfn.stop_execution(executionArn=execution)
