"""The local runtime refuses, per request, what AWS refuses and moto 5.2.5 accepts: payloads over
a service's limit, mail out of a new account's SES sandbox, and a refusal by IAM answered with
each service's own code and HTTP status (infra/local/service_limits.py, iam.py)."""

import io
import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from toolpipe.infra.cdk.functions import FUNCTIONS
from toolpipe.infra.local import iam
from toolpipe.infra.local.isolation import FunctionContext, running_as
from toolpipe.infra.local.runtime import EMAIL_SENDER, REGION, TABLE, LocalRuntime
from toolpipe.shared.runs.events import SOURCE

MB = 1024 * 1024


@pytest.fixture(scope="module")
def runtime() -> Iterator[LocalRuntime]:
    with LocalRuntime(workers=0) as rt:
        yield rt


def _refusal(context: FunctionContext, call_aws: Callable[[], Any]) -> tuple[str, int, str]:
    with running_as(context), pytest.raises(ClientError) as raised:
        call_aws()
    response = raised.value.response
    return (
        response["Error"]["Code"],
        response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0),
        str(raised.value),
    )


def test_iam_refusals_carry_each_services_own_code_and_status(runtime: LocalRuntime) -> None:
    worker, api = runtime.functions["tool_worker"], runtime.functions["api"]
    machine = runtime.deployment.state_machine_context()
    missing = runtime.signing_key_arn.rsplit(":", 1)[0] + ":no-such-secret-AbCdEf"
    refusals = {
        # Secrets Manager refuses before it looks: a secret the role may not read is denied
        # whether or not it exists (AWS never says which).
        "secretsmanager": _refusal(
            worker,
            lambda: boto3.client("secretsmanager", region_name=REGION).get_secret_value(SecretId=missing),
        ),
        "dynamodb": _refusal(
            machine,
            lambda: boto3.client("dynamodb", region_name=REGION).get_item(
                TableName="toolpipe-local", Key={"pk": {"S": "x"}, "sk": {"S": "y"}}
            ),
        ),
        "sqs": _refusal(
            api,
            lambda: boto3.client("sqs", region_name=REGION).send_message(
                QueueUrl=runtime.queue_url, MessageBody="{}"
            ),
        ),
        "lambda": _refusal(
            api,
            lambda: boto3.client("lambda", region_name=REGION).invoke(
                FunctionName=runtime.functions["tool_worker"].environment["AWS_LAMBDA_FUNCTION_NAME"]
            ),
        ),
        "ses": _refusal(
            worker,
            lambda: boto3.client("ses", region_name=REGION).send_email(
                Source=EMAIL_SENDER,
                Destination={"ToAddresses": [EMAIL_SENDER]},
                Message={"Subject": {"Data": "s"}, "Body": {"Text": {"Data": "b"}}},
            ),
        ),
    }
    assert {service: (code, status) for service, (code, status, _) in refusals.items()} == {
        "secretsmanager": ("AccessDeniedException", 400),
        "dynamodb": ("AccessDeniedException", 400),
        "sqs": ("AccessDenied", 403),
        "lambda": ("AccessDeniedException", 403),
        "ses": ("AccessDenied", 403),
    }
    assert "secretsmanager:GetSecretValue" in refusals["secretsmanager"][2]


def test_lambda_refuses_an_invoke_request_over_its_payload_limits(runtime: LocalRuntime) -> None:
    worker = runtime.functions["tool_worker"]
    runner = worker.environment["TOOLPIPE_TOOL_RUNNER"]
    aws = boto3.client("lambda", region_name=REGION)
    synchronous = json.dumps({"x": "a" * (6 * MB)}).encode()
    assert _refusal(worker, lambda: aws.invoke(FunctionName=runner, Payload=synchronous))[:2] == (
        "RequestTooLargeException",
        413,
    )
    asynchronous = io.BytesIO(json.dumps({"x": "a" * MB}).encode())  # a file, as boto3 takes one
    code, status, message = _refusal(
        worker, lambda: aws.invoke(FunctionName=runner, InvocationType="Event", Payload=asynchronous)
    )
    assert (code, status) == ("RequestTooLargeException", 413) and f"{MB} bytes" in message


def test_eventbridge_refuses_a_put_whose_entries_pass_256_kb(runtime: LocalRuntime) -> None:
    name, spec = next((name, spec) for name, spec in FUNCTIONS.items() if spec.publishes)
    aws = boto3.client("events", region_name=REGION)

    def put(*details: str) -> Any:
        entries = [
            {
                "EventBusName": runtime.event_bus_name,
                "Source": SOURCE,
                "DetailType": spec.publishes[0],
                "Detail": d,
            }
            for d in details
        ]
        return aws.put_events(Entries=entries)

    overhead = len(SOURCE) + len(spec.publishes[0])
    with running_as(runtime.functions[name]):
        assert put(json.dumps({"x": "a" * (200_000 - overhead)}))["FailedEntryCount"] == 0
    # One entry over the limit, and two that are each under it but not together.
    for details in ([json.dumps({"x": "a" * 262_144})], [json.dumps({"x": "a" * 140_000})] * 2):
        assert _refusal(runtime.functions[name], lambda details=details: put(*details))[:2] == (
            "ValidationException",
            400,
        )


def test_sqs_counts_a_message_in_bytes_with_its_attributes(runtime: LocalRuntime) -> None:
    machine = runtime.deployment.state_machine_context()  # sends to the tool queue
    aws = boto3.client("sqs", region_name=REGION)
    with running_as(machine):
        aws.send_message(QueueUrl=runtime.queue_url, MessageBody="é" * 500_000)  # 1,000,000 bytes
    for body, attributes in (
        ("€" * 400_000, {}),  # 400,000 characters, 1,200,000 bytes
        ("a" * 1_040_000, {"note": {"DataType": "String", "StringValue": "b" * 20_000}}),
    ):
        code, status, message = _refusal(
            machine,
            lambda body=body, attributes=attributes: aws.send_message(
                QueueUrl=runtime.queue_url, MessageBody=body, MessageAttributes=attributes
            ),
        )
        assert (code, status) == ("InvalidParameterValue", 400) and "shorter than 1048576 bytes" in message


def _sender() -> FunctionContext:
    allowed = {"Effect": "Allow", "Action": "ses:SendEmail", "Resource": "*"}
    return FunctionContext(
        name="mailer",
        environment={},
        policy=iam.Policy("arn:aws:iam::123456789012:role/mailer", ({"Statement": [allowed]},)),
    )


def _send(*to: str) -> Any:
    return boto3.client("ses", region_name=REGION).send_email(
        Source=EMAIL_SENDER,
        Destination={"ToAddresses": list(to)},
        Message={"Subject": {"Data": "s"}, "Body": {"Text": {"Data": "b"}}},
    )


def test_ses_starts_in_the_sandbox_as_a_new_account_does(runtime: LocalRuntime) -> None:
    mailer = _sender()
    code, status, message = _refusal(mailer, lambda: _send("someone@example.org"))
    assert (code, status) == ("MessageRejected", 400)
    assert message.endswith(
        "Email address is not verified. The following identities failed the check in region "
        "US-EAST-1: someone@example.org"
    )
    runtime.ses.verify_email_identity(EmailAddress="someone@example.org")
    with running_as(mailer):
        _send("someone@example.org")  # verified, as on AWS
        _send("success@simulator.amazonses.com")  # the mailbox simulator needs no verifying
        for _ in range(99):  # 200 messages in 24 hours, each recipient one
            _send("success@simulator.amazonses.com", "someone@example.org")
    assert _refusal(mailer, lambda: _send("someone@example.org"))[:2] == ("Throttling", 400)


def test_dynamodb_refuses_a_number_it_cannot_store_in_every_write(runtime: LocalRuntime) -> None:
    """moto checks a number's range only in PutItem's item, and never its digits: a float made a
    Decimal (`Decimal(0.1)`, 55 digits) was stored here and refused by AWS."""
    orchestrator = runtime.functions["orchestrator"]
    aws = boto3.client("dynamodb", region_name=REGION)
    table, key = TABLE, {"pk": {"S": "NUMBERS#1"}, "sk": {"S": "N"}}
    widest, tiniest, largest = "9" * 38, "1E-130", "9.9999999999999999999999999999999999999E+125"

    def put(value: dict[str, Any]) -> Any:
        return aws.put_item(TableName=table, Item={**key, "n": value})

    def update(value: dict[str, Any]) -> Any:
        return aws.update_item(
            TableName=table, Key=key, UpdateExpression="SET n = :n", ExpressionAttributeValues={":n": value}
        )

    def batch(value: dict[str, Any]) -> Any:
        return aws.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": {**key, "n": value}}}]})

    def transact(value: dict[str, Any]) -> Any:
        updates = {"TableName": table, "Key": key, "UpdateExpression": "ADD spent :n"}
        return aws.transact_write_items(
            TransactItems=[{"Update": {**updates, "ExpressionAttributeValues": {":n": value}}}]
        )

    with running_as(orchestrator):
        for write in (put, update, batch):
            for fits in (widest, tiniest, largest, "-" + widest + "000", "0.000" + widest):
                write({"N": fits})
            write({"M": {"costs": {"L": [{"NS": [widest, "1"]}]}}})
        transact({"N": "1"})
    refusals = {
        "1" * 39: "Attempting to store more than 38 significant digits in a Number",
        str(Decimal.from_float(0.1)): "Attempting to store more than 38 significant digits in a Number",
        "1E126": "Number overflow. Attempting to store a number with magnitude larger than supported range",
        "-9E-131": "Number underflow. Attempting to store a number with magnitude smaller than supported range",
    }
    for write in (put, update, batch, transact):
        for number, said in refusals.items():
            for value in ({"N": number}, {"M": {"costs": {"L": [{"NS": ["1", number]}]}}}):
                if write is transact and "M" in value:
                    continue  # ADD takes a number or a set
                code, status, message = _refusal(orchestrator, lambda w=write, v=value: w(v))
                assert (code, status) == ("ValidationException", 400), (write.__name__, value)
                assert message.endswith(f": {said}"), message


def test_a_resources_map_with_a_member_named_n_is_not_a_number(runtime: LocalRuntime) -> None:
    """Through the Table resource (how shared/ writes), `{"N": "1"*39}` is a map holding a string
    (a run's metadata may have a label named N): AWS stores it. The review's repro: it was refused
    when the check read the parameters before boto3 had converted them."""
    table = boto3.resource("dynamodb", region_name=REGION).Table(TABLE)
    with running_as(runtime.functions["api"]):
        table.put_item(Item={"pk": "NUMBERS#2", "sk": "N", "metadata": {"N": "1" * 39}})


def test_a_table_resources_numbers_are_checked_as_sent(runtime: LocalRuntime) -> None:
    """A Table resource's Decimals become attribute values as the call is built; boto3's own
    checks let 1E126 and 1E-131 through, AWS refuses them, moto stores them."""
    orchestrator = runtime.functions["orchestrator"]
    table = boto3.resource("dynamodb", region_name=REGION).Table(TABLE)
    key = {"pk": "NUMBERS#3", "sk": "N"}
    for number in ("1E126", "1E-131"):
        code, status, _ = _refusal(
            orchestrator,
            lambda n=number: table.update_item(
                Key=key, UpdateExpression="SET n = :n", ExpressionAttributeValues={":n": Decimal(n)}
            ),
        )
        assert (code, status) == ("ValidationException", 400), number


def test_a_malformed_write_gets_botocores_own_error(runtime: LocalRuntime) -> None:
    """The numbers are read once botocore has checked the call's shapes: a check that read them
    before raised AttributeError and TypeError of its own (the review's repro)."""
    from botocore.exceptions import ParamValidationError

    aws = boto3.client("dynamodb", region_name=REGION)
    with running_as(runtime.functions["orchestrator"]):
        with pytest.raises(ParamValidationError):
            aws.put_item(TableName=TABLE, Item=[1])  # type: ignore[arg-type]
        with pytest.raises(ParamValidationError):
            aws.batch_write_item(RequestItems={TABLE: None})  # type: ignore[dict-item]


def test_a_number_pythons_decimal_cannot_read_as_aws_does_is_refused(runtime: LocalRuntime) -> None:
    """Python's Decimal holds no exponent past 10**18 and reads "1_000" and other scripts' digits
    as numbers; moto's UpdateItem stored each, AWS refuses each."""
    aws = boto3.client("dynamodb", region_name=REGION)
    key = {"pk": {"S": "NUMBERS#4"}, "sk": {"S": "N"}}
    refusals = {
        "1E+9999999999999999999999": "Number overflow.",
        "-1.5e-9999999999999999999999": "Number underflow.",
        "1_000": "The parameter cannot be converted to a numeric value: 1_000",
        "\u0661\u0662": "The parameter cannot be converted to a numeric value",
    }
    for number, said in refusals.items():
        code, status, message = _refusal(
            runtime.functions["orchestrator"],
            lambda n=number: aws.update_item(
                TableName=TABLE,
                Key=key,
                UpdateExpression="SET n = :n",
                ExpressionAttributeValues={":n": {"N": n}},
            ),
        )
        assert (code, status) == ("ValidationException", 400) and said in message, number
    with running_as(runtime.functions["orchestrator"]):  # zero, whatever its exponent
        aws.put_item(TableName=TABLE, Item={**key, "n": {"N": "0E+9999999999999999999999"}})
