"""The local runtime's own AWS clients: made once per process, not at every start.

A runtime deploys the template and serves its workers through clients of nine services. Once
the process has started one runtime, making those clients was close to half of the next one's
start (~55 ms of ~125 ms of CPU): each client builds its class, copies its session's handlers
and resolves its endpoint afresh, and moto gives boto3 a new default session at every start.
A project's tests start a runtime per test.

A client holds no AWS data: what it reaches is moto's backends, which every start resets. The
clients are kept per the AWS settings of the environment they were made in (a client reads its
credentials, endpoint and retry settings when it is made), so a runtime started with other
settings gets clients of its own. They are the runtime's alone: the clients it hands out
(`runtime.sqs`...) are made for each runtime, so what a test registers on one of those never
reaches the next runtime's deployment or workers.
"""

import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_s3.client import S3Client
    from mypy_boto3_sqs.client import SQSClient


@dataclass(frozen=True)
class Clients:
    """One client of each service the runtime calls itself."""

    dynamodb: "DynamoDBClient"
    s3: "S3Client"
    sqs: "SQSClient"
    lambda_client: Any
    sfn: Any
    secrets: Any
    events: Any
    iam: Any
    ses: Any


_kept: dict[tuple[str, tuple[tuple[str, str], ...]], Clients] = {}
_lock = threading.Lock()


def kept(region: str) -> Clients:
    """The process's clients for `region` and the environment's AWS settings, made on first use."""
    settings = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    with _lock:
        clients = _kept.get((region, settings))
        if clients is None:
            clients = _kept[(region, settings)] = Clients(
                dynamodb=boto3.client("dynamodb", region_name=region),
                s3=boto3.client("s3", region_name=region),
                sqs=boto3.client("sqs", region_name=region),
                lambda_client=boto3.client("lambda", region_name=region),
                sfn=boto3.client("stepfunctions", region_name=region),
                secrets=boto3.client("secretsmanager", region_name=region),
                events=boto3.client("events", region_name=region),
                iam=boto3.client("iam", region_name=region),
                ses=boto3.client("ses", region_name=region),
            )
        return clients
