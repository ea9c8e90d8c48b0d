"""A thread of a stopped local function calls nothing, whenever it calls and through any client.

A thread of a function can outlive its runtime: a tool that hung past the runtime's shutdown
is left to its thread, as Lambda leaves a killed sandbox's. While any runtime is up, `iam.py`
refuses such a thread's calls. But the last runtime to stop puts botocore back as it was, and
with the mock gone a late call went to AWS itself: a hung call's cost count, once it ended,
was sent to dynamodb.us-east-1.amazonaws.com after its test had ended.

So each client made while a runtime is up carries the refusal itself, as a handler of its own
events, which no runtime's undo removes: a call made in the context of a function whose runtime
has stopped (the thread's context outlives the runtime too) fails before it is built
(`ServiceUnavailable`), whether another runtime is up or none. It is the caller that is
checked, not the client's maker: a client kept for the process (the cost store's) serves each
runtime's functions in turn.
"""

from collections.abc import Callable
from typing import Any

from botocore.client import ClientCreator
from botocore.exceptions import ClientError

from toolpipe.infra.local.caller import FunctionContext, current
from toolpipe.infra.local.process_patch import Patched

_UNIQUE_ID = "toolpipe-local-refuse-if-stopped"


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


def _refuse_if_stopped(model: Any, **kwargs: Any) -> None:
    function = current()
    if function is not None and function.stopped:
        raise stopped_error(function, model.name)


def _creating_clients(original: Callable[..., Any]) -> Callable[..., Any]:
    def create_client(self: ClientCreator, *args: Any, **kwargs: Any) -> Any:
        client = original(self, *args, **kwargs)
        # First: before anything else answers for the call.
        client.meta.events.register_first("before-call", _refuse_if_stopped, unique_id=_UNIQUE_ID)
        return client

    return create_client


_PATCHED = Patched([(ClientCreator, "create_client", _creating_clients)], wrap=True)


def install() -> Callable[[], None]:
    """Clients made from now until the last runtime's undo refuse a stopped function's calls;
    they keep that refusal after it."""
    return _PATCHED.install()
