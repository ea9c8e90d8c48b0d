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
reaches the next runtime's deployment or workers. Those are made from the same session
(`Clients.session`), so an error the runtime's own calls raise is an instance of the classes a
caller catches it by (`runtime.sfn.exceptions.ExecutionDoesNotExist`): botocore makes a
service's exception classes once per session.
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
    """One client of each service the runtime calls itself, and the session they came from."""

    session: boto3.Session
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
            session = boto3.Session()
            clients = _kept[(region, settings)] = Clients(
                session=session,
                dynamodb=session.client("dynamodb", region_name=region),
                s3=session.client("s3", region_name=region),
                sqs=session.client("sqs", region_name=region),
                lambda_client=session.client("lambda", region_name=region),
                sfn=session.client("stepfunctions", region_name=region),
                secrets=session.client("secretsmanager", region_name=region),
                events=session.client("events", region_name=region),
                iam=session.client("iam", region_name=region),
                ses=session.client("ses", region_name=region),
            )
        return clients
