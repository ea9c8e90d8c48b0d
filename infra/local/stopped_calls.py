"""A thread of a stopped local function calls no AWS API, whenever it calls and through any client.

A thread of a function can outlive its runtime: a tool that hung past the runtime's shutdown
is left to its thread, as Lambda leaves a killed sandbox's. While any runtime is up, `iam.py`
refuses such a thread's calls. But the last runtime to stop puts botocore and `os.environ` back
as they were, and with the mock gone a late call went to AWS itself: a hung
call's cost count, once it ended, was sent to dynamodb.us-east-1.amazonaws.com after its test
had ended, and a client the thread made then was signed with the process's own credentials.

So the first runtime to start installs a guard that no runtime's stop removes, like moto's
patches (`infra/local/patches/`): a botocore call made in the context of a function whose
runtime has stopped (the thread's context outlives the runtime) fails before it is built
(`ServiceUnavailable`), through any client, made before, during or after any runtime, whether
another runtime is up or none; and a thread such a thread starts inherits its stopped context
(Python's threads start in an empty one; with no runtime up, the only functions a thread can
run as are stopped ones), so the threads of an S3 transfer or a tool's own threads are refused
too. Outside a function's threads, both pass straight through: one context-variable read. It
is the caller that is checked, not the client's maker: a client made in one runtime and kept
(a tool module's own, say) serves each later runtime's functions in turn.
"""

import threading
from typing import Any

from botocore.client import BaseClient
from botocore.exceptions import ClientError

from toolpipe.infra.local.caller import FunctionContext, current, threads_inherit

_lock = threading.Lock()
_installed = False


def stopped_error(context: FunctionContext, operation_name: str) -> ClientError:
    """What a call of a function whose runtime has stopped fails with."""
    return ClientError(
        {
            "Error": {
                "Code": "ServiceUnavailable",
                "Message": f"the local runtime of {context.name} has stopped",
            }
        },
        operation_name,
    )


def _stopped() -> FunctionContext | None:
    function = current()
    return function if function is not None and function.stopped else None


def install() -> None:
    """Install the guard, once a process; it is never undone."""
    global _installed
    with _lock:
        if _installed:
            return
        make_api_call = BaseClient._make_api_call  # type: ignore[attr-defined]

        def _make_api_call(self: BaseClient, operation_name: str, api_params: dict[str, Any]) -> Any:
            stopped = _stopped()
            if stopped is not None:
                raise stopped_error(stopped, operation_name)
            return make_api_call(self, operation_name, api_params)

        BaseClient._make_api_call = _make_api_call  # type: ignore[attr-defined]
        # No runtime up, the only functions a thread can run as are stopped ones.
        threads_inherit()
        _installed = True
