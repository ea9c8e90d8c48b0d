"""Per-task costs and one race of moto's Step Functions interpreter, patched once per process.

- A new boto3 client per Task state (~2.2 ms each: botocore's service model decoded again):
  clients are kept per region and service, as boto3 clients are thread-safe.
- A new JSONPath parser per expression (~0.3 ms each: ply's lexer and parser built again):
  parsed expressions are kept per text; jsonpath_ng's expressions do not change when used.
- A `waitForTaskToken` task sets up its heartbeat clock only after its message is sent. A
  worker answering within that window (local workers are woken by the send, so they can) saw
  its first heartbeat refused as an invalid token, and a success arriving then waited out the
  whole heartbeat timeout. On AWS the token is valid from the send: a heartbeat before the
  clock starts is accepted, and an outcome already in ends the wait at once.
"""

import functools
import sys
import threading
from typing import Any

from jsonpath_ng import parse as jsonpath_parse
from jsonpath_ng.ext import parse as jsonpath_ext_parse
from moto.stepfunctions.parser.asl.component.common.path import result_path
from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackEndpoint, HeartbeatEndpoint
from moto.stepfunctions.parser.asl.utils import boto_client, json_path

_lock = threading.Lock()
_installed = False
_original_client = boto_client.boto_client_for
_clients: dict[tuple[str, str, bool], Any] = {}
_clients_lock = threading.Lock()


def cached_client(region: str, service: str, state_credentials: Any = None) -> Any:
    """moto's `boto_client_for`, one client per region, service and endpoint."""
    key = (region, service, bool(boto_client.botocore_stubber.enabled))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = _original_client(region, service, state_credentials)
        return client


cached_parse = functools.lru_cache(maxsize=1024)(jsonpath_ext_parse)
cached_result_path_parse = functools.lru_cache(maxsize=1024)(jsonpath_parse)


def _setup_heartbeat_endpoint(self: CallbackEndpoint, heartbeat_seconds: int) -> HeartbeatEndpoint:
    endpoint = HeartbeatEndpoint(heartbeat_seconds=heartbeat_seconds)
    self._heartbeat_endpoint = endpoint
    # `notify` stores the outcome before it reads the endpoint: whichever runs second sees
    # the other's write, so an outcome that came in first still ends the wait.
    if self.get_outcome() is not None:
        endpoint.notify()
    return endpoint


def _notify_heartbeat(self: CallbackEndpoint) -> bool:
    endpoint = self._heartbeat_endpoint
    if endpoint is None:
        return True  # the task is live; its heartbeat clock has not started yet
    endpoint.notify()
    return True


def install() -> None:
    """Apply the patches, once per process."""
    global _installed
    with _lock:
        if _installed:
            return
        # Modules imported `boto_client_for` by name: rebind it wherever it was taken.
        import moto.stepfunctions.parser.asl.parse.preprocessor  # noqa: F401  (imports every state)

        for module in list(sys.modules.values()):
            if getattr(module, "boto_client_for", None) is _original_client:
                module.boto_client_for = cached_client  # type: ignore[attr-defined]
        json_path.parse = cached_parse
        result_path.parse = cached_result_path_parse  # type: ignore[attr-defined]
        CallbackEndpoint.setup_heartbeat_endpoint = _setup_heartbeat_endpoint  # type: ignore[method-assign]
        CallbackEndpoint.notify_heartbeat = _notify_heartbeat  # type: ignore[method-assign]
        _installed = True
