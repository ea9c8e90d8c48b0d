"""One request at a time into moto's in-memory backends.

moto keeps tables, buckets and executions in plain dicts with no locks of their own. With
the local workers, the API and moto's execution threads all calling it at once, a query
iterating a table while a worker puts an item fails with "dictionary changed size during
iteration" (seen in CI, and reproduced in tests/functional/test_local_concurrency.py), and
a conditional put is a check followed by a write, so two threads could both pass the check
that our idempotency claims rely on. AWS applies each request atomically; one lock around
every request gives moto the same property.

Lambda invocations stay outside the lock: an invocation runs a whole handler, and under
the lock workers and the orchestrator would run one at a time; the handler's own requests
take the lock one by one. SQS is inside it: moto's queue drops a message sent while another
is being deleted, and lets two workers receive the same visible message. So nothing may
long-poll here (the wait would hold the lock): the local workers short-poll instead.
"""

import logging
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from moto.core.botocore_stubber import BotocoreStubber

from toolpipe.infra.local.process_patch import Patched

# The endpoint host, as botocore builds it: lambda.us-east-1.amazonaws.com
_UNSERIALISED_HOST = "lambda."

_request_lock = threading.RLock()  # re-entrant: a request moto serves may make another
_install_lock = threading.Lock()  # the listeners'
# Called with each request after moto served it, outside the lock: how local consumers learn of
# a send without polling (infra/local/workers.py). Set once by whoever installs it.
_listeners: list[Callable[[Any], None]] = []


def add_listener(listener: Callable[[Any], None]) -> None:
    """Call `listener(request)` after every request moto serves (once per listener)."""
    with _install_lock:
        if listener not in _listeners:
            _listeners.append(listener)


def remove_listener(listener: Callable[[Any], None]) -> None:
    """Stop calling `listener`; nothing happens if it was not added."""
    with _install_lock:
        if listener in _listeners:
            _listeners.remove(listener)


def _notify(request: Any) -> None:
    # After moto applied the request: a listener that fails must not turn it into an error for
    # its caller (who would send it again: a batch sent twice), nor keep the others from hearing.
    for listener in list(_listeners):
        try:
            listener(request)
        except Exception:
            logging.getLogger(__name__).exception("a listener of the local requests failed")


# Told of every request before moto serves it (infra/local/persistence.py journals the writes);
# what it returns is called with the response's status, still under the lock, so the journal
# has the order moto applied the requests in.
Completion = Callable[[int], None]
Observer = Callable[[Any], Completion | None]
_observer: Observer | None = None


def observe(observer: Observer | None) -> None:
    """Set (or, with None, remove) the one observer of requests."""
    global _observer
    with _request_lock:
        _observer = observer


def exclusive() -> threading.RLock:
    """The request lock itself: held, no request reaches moto from another thread."""
    return _request_lock


def _serialised(dispatch: Callable[[BotocoreStubber, Any], Any]) -> Callable[[BotocoreStubber, Any], Any]:
    def process_request(self: BotocoreStubber, request: Any) -> Any:
        if (urlsplit(request.url).hostname or "").startswith(_UNSERIALISED_HOST):
            return dispatch(self, request)
        with _request_lock:
            done = _observer(request) if _observer is not None else None
            response = dispatch(self, request)
            if done is not None and response is not None:
                done(response[0])
        if response is not None:
            # None: not moto's to serve, and sent over the network instead (to the runtime's
            # own AWS endpoint, say, which announces it when it serves it).
            _notify(request)
        return response

    return process_request


_PATCHED = Patched([(BotocoreStubber, "process_request", _serialised)], wrap=True)


def install() -> Callable[[], None]:
    """Wrap moto's request dispatch in the lock, until the last runtime's undo."""
    return _PATCHED.install()
