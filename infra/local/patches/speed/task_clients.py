"""One boto3 client per region and service for the interpreter's tasks.

moto: the Step Functions interpreter builds a new boto3 client for every Task state (~2.2 ms
each: botocore's service model decoded again).

Why it matters: every turn of a run goes through a few Task states.

The patch: clients are kept per region, service and whether moto is on (boto3 clients are
thread-safe), rebound wherever a module took `boto_client_for` by name.
"""

import sys
import threading
from typing import Any

from moto.core.models import botocore_stubber
from moto.stepfunctions.parser.asl.utils import boto_client

CHECKED_WITH = ("5.2.5",)

_original_client = boto_client.boto_client_for
_clients: dict[tuple[str, str, bool], Any] = {}
_clients_lock = threading.Lock()


def cached_client(region: str, service: str, state_credentials: Any = None) -> Any:
    """moto's `boto_client_for`, one client per region, service and endpoint."""
    key = (region, service, bool(botocore_stubber.enabled))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = _original_client(region, service, state_credentials)
        return client


def install() -> None:
    # Loads the modules that take the function by name, so that they are rebound below.
    import moto.stepfunctions.parser.asl.parse.preprocessor  # noqa: F401

    for module in list(sys.modules.values()):
        if getattr(module, "boto_client_for", None) is _original_client:
            module.boto_client_for = cached_client  # type: ignore[attr-defined]
