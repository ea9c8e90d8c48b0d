"""The operations one invocation makes, counted as they are made, and the run each is for.

A `Meter` lives for one invocation (`invocation.py` makes it current in a context variable).
The pipeline's own clients feed it through botocore's event hooks (`watch`): every request
they make adds what it counts as (`requests.py`) to the run the invocation is working for at
that moment (`attribute`). Clients a tool builds are not watched: a tool's own AWS use is the
tool author's cost, not the pipeline's. A request made while no meter is current (a cold start's
setup, a test outside a handler) counts nowhere; so does one made before any run is named,
unless a run is named later in the same invocation (a start learns its run id after writing).
"""

import contextvars
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from toolpipe.shared.costs.operations import Operations
from toolpipe.shared.costs.requests import counters

if TYPE_CHECKING:
    from botocore.client import BaseClient

# Where the meter asks for an updated or deleted item back, to bill it on its real size
# (dynamodb_units.py), and drops it again before the caller sees the answer.
logger = logging.getLogger(__name__)
_ASK_BACK = {"UpdateItem": "ALL_NEW", "DeleteItem": "ALL_OLD"}
_ASKED = "toolpipe_meter_asked_back"
_PARAMS = "toolpipe_meter_params"

Client = TypeVar("Client", bound="BaseClient")

_current: contextvars.ContextVar["Meter | None"] = contextvars.ContextVar("toolpipe_meter", default=None)


class Meter:
    """Counters by run for one invocation; safe to feed from the invocation's threads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.started = clock()
        self._pending: dict[str, float] = {}  # made before any run was named
        self._by_run: dict[str, dict[str, float]] = {}
        self._run: str | None = None
        # (since, run): the run the invocation worked for from `since` on, for its duration.
        self._segments: list[tuple[float, str | None]] = []
        self._unattributed_since = self.started

    @property
    def run(self) -> str | None:
        return self._run

    def attribute(self, run_id: str) -> None:
        """From now on the invocation works for `run_id`; what it made since it last worked for
        no run (since it started, or since `detach`) is `run_id`'s too, and so is that time."""
        with self._lock:
            if run_id == self._run:
                return
            since = self._clock()
            if self._run is None:
                _add(self._by_run.setdefault(run_id, {}), self._pending)
                self._pending = {}
                since = self._unattributed_since
            self._run = run_id
            self._segments.append((since, run_id))

    def detach(self) -> None:
        """From now on the invocation works for no run until one is named (a trigger's next event,
        whose run is known only once it started)."""
        with self._lock:
            if self._run is None:
                return
            now = self._clock()
            self._segments.append((now, None))
            self._run = None
            self._unattributed_since = now

    def add(self, counted: dict[str, float]) -> None:
        with self._lock:
            target = self._pending if self._run is None else self._by_run.setdefault(self._run, {})
            _add(target, counted)

    def add_function(self, role: str, requests: int, mb_ms: int) -> None:
        """A function's invocation (the tool runner's, counted by the worker that invoked it)."""
        self.add({f"fn_req#{role}": requests, f"fn_mbms#{role}": mb_ms})

    def close(self, role: str, memory_mb: int) -> dict[str, Operations]:
        """The invocation is over: add its own request (to the first run it worked for) and each
        run's part of its billed duration (a millisecond at least, rounded up, as Lambda bills),
        and give the counts by run."""
        with self._lock:
            bounds = [since for since, _ in self._segments[1:]] + [self._clock()] if self._segments else []
            first = True
            for (since, run_id), until in zip(self._segments, bounds, strict=True):
                if run_id is None:
                    continue
                # Rounded to the microsecond first: float noise must not bill a whole extra millisecond.
                billed_ms = max(1, math.ceil(round((until - since) * 1000, 3)))
                use = {f"fn_mbms#{role}": billed_ms * memory_mb, f"fn_req#{role}": 1 if first else 0}
                _add(self._by_run.setdefault(run_id, {}), use)
                first = False
            return {run_id: Operations.from_counters(c) for run_id, c in self._by_run.items()}

    def run_ids(self) -> list[str]:
        """The runs the invocation worked for, in order."""
        with self._lock:
            return list(dict.fromkeys(run_id for _, run_id in self._segments if run_id is not None))

    def add_to(self, run_id: str, ops: Operations) -> None:
        with self._lock:
            _add(self._by_run.setdefault(run_id, {}), ops.counters())


def _add(target: dict[str, float], counted: Mapping[str, float]) -> None:
    for name, value in counted.items():
        if value:
            target[name] = target.get(name, 0) + value


def detach() -> None:
    """The current invocation works for no run until one is named (nothing without a meter)."""
    meter = _current.get()
    if meter is not None:
        meter.detach()


def current() -> Meter | None:
    return _current.get()


def use(meter: Meter | None) -> contextvars.Token["Meter | None"]:
    return _current.set(meter)


def release(token: contextvars.Token["Meter | None"]) -> None:
    _current.reset(token)


def attribute(run_id: str) -> None:
    """The current invocation works for `run_id` from now on (nothing without a meter)."""
    meter = _current.get()
    if meter is not None:
        meter.attribute(run_id)


def watch(client: Client) -> Client:
    """`client`, counting every request it makes into the current meter. Idempotent."""
    events = client.meta.events
    events.register("before-parameter-build", _before, unique_id="toolpipe-meter-before")
    events.register("after-call", _after, unique_id="toolpipe-meter-after")
    # DynamoDB's items in their wire form (`{"S": ...}`), what it bills by: after boto3's table
    # resource has serialized the request's values, before it deserializes the answer's (its
    # handlers sit on these events; botocore runs a more specific event's handlers first).
    events.register_last("before-parameter-build.dynamodb", _before, unique_id="toolpipe-meter-before-ddb")
    events.register_first("after-call.dynamodb", _after_dynamodb, unique_id="toolpipe-meter-after-ddb")
    return client


def _before(params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
    if _current.get() is None:
        return
    # Both registrations see a DynamoDB request: the later one (the wire form) is kept.
    context[_PARAMS] = params
    asks_back = model.service_model.service_name == "dynamodb" and model.name in _ASK_BACK
    if asks_back and params.get("ReturnValues", "NONE") == "NONE":
        params["ReturnValues"] = _ASK_BACK[model.name]
        context[_ASKED] = True


def _after(parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
    if model.service_model.service_name != "dynamodb":
        _count(parsed, model, context)


def _after_dynamodb(parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
    _count(parsed, model, context)


def _count(parsed: dict[str, Any], model: Any, context: dict[str, Any]) -> None:
    meter = _current.get()
    if meter is None:
        return
    params = context.get(_PARAMS) or {}
    try:
        meter.add(counters(model.service_model.service_name, model.name, params, parsed))
    except Exception:
        # The meter watches; it never fails the request it watches. A shape it cannot read is
        # a count lost, said aloud.
        logger.exception("an AWS request was not counted", extra={"operation": model.name})
    finally:
        if context.pop(_ASKED, False):
            parsed.pop("Attributes", None)


def count(counted: dict[str, float]) -> None:
    """Add `counted` to the current invocation's meter (nothing without one)."""
    meter = _current.get()
    if meter is not None:
        meter.add(counted)


def count_function(role: str, billed_ms: int, memory_mb: int) -> None:
    """One invocation of another function (the tool runner) that this one made and waited for."""
    count({f"fn_req#{role}": 1, f"fn_mbms#{role}": max(1, billed_ms) * memory_mb})
