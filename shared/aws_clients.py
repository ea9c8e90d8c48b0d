"""The boto3 clients one function's services share, made at first use.

A function builds its services at its cold start (shared/runs/factory.py): stores, publishers,
reporters and starters, each calling DynamoDB, S3, Step Functions or EventBridge. Each of them
made a client of its own: the orchestrator made 16 by its first invocation's end (six DynamoDB,
five S3, three Step Functions, two EventBridge), where one of each does. Making a client is
~2 ms of CPU here (its class, its handlers, its endpoint's rules), more on a Lambda function's
share of a core, and all of it is cold-start time.

One `AwsClients` per function: one client per service and configuration, and one DynamoDB
resource for its tables. boto3's clients are thread-safe; the tables share the resource, as
the services that hold them already share each table across the invocations a process runs.
A configuration is told apart by identity: the same `Config` object gets the same client,
another object (even an equal one) a client of its own.
"""

import threading
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

from toolpipe.shared.costs.meter import watch

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import DynamoDBServiceResource, Table


class AwsClients:
    """The clients of one function, each made on first use and kept for its life."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, Config | None], Any] = {}
        self._dynamodb: DynamoDBServiceResource | None = None

    def client(self, service: str, config: Config | None = None) -> Any:
        """The function's client of `service` with `config` (None: boto3's defaults)."""
        with self._lock:
            made = self._clients.get((service, config))
            if made is None:
                made = self._clients[(service, config)] = boto3.client(service, config=config)  # type: ignore[call-overload]  # any service name
            return made

    def table(self, name: str) -> "Table":
        """The table `name`, through a client whose requests count in the runs' cost
        (shared/costs): the pipeline's own clients are watched (`watch`), never a tool's."""
        with self._lock:
            if self._dynamodb is None:
                self._dynamodb = boto3.resource("dynamodb")
                watch(self._dynamodb.meta.client)
            return self._dynamodb.Table(name)
