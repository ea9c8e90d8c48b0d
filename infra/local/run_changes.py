"""Which runs changed, from the DynamoDB writes the handlers make: what an event stream of
`toolpipe serve` waits on instead of querying the table on a timer."""

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

from toolpipe.infra.local import serial

_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
_RUN_KEY = re.compile(rb'"pk"\s*:\s*\{\s*"S"\s*:\s*"RUN#([A-Za-z0-9_-]{1,64})"')


class RunChanges:
    """Wakes whoever watches a run when a DynamoDB write names the run's partition.

    Every item of a run (record, history, claims) lives under `pk=RUN#<id>`, and every write the
    handlers make goes through moto's request dispatch, which tells `serial`'s listeners of each:
    an event stream waits for a change instead of querying the table on a timer.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._versions: dict[str, int] = {}
        self._watchers: dict[str, int] = {}
        self._closed = False

    @contextlib.contextmanager
    def watch(self, run_id: str) -> Iterator[None]:
        with self._changed:
            self._watchers[run_id] = self._watchers.get(run_id, 0) + 1
            self._versions.setdefault(run_id, 0)
        try:
            yield
        finally:
            with self._changed:
                self._watchers[run_id] -= 1
                if not self._watchers[run_id]:
                    del self._watchers[run_id], self._versions[run_id]

    def version(self, run_id: str) -> int:
        with self._changed:
            return self._versions.get(run_id, 0)

    def wait(self, run_id: str, seen: int, timeout: float) -> bool:
        """Wait until the run changed after version `seen`; False on timeout or close."""
        with self._changed:
            return (
                self._changed.wait_for(lambda: self._closed or self._versions.get(run_id, 0) != seen, timeout)
                and not self._closed
            )

    @property
    def closed(self) -> bool:
        with self._changed:
            return self._closed

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def seen(self, request: Any) -> None:
        """A request moto served (`serial.add_listener`): a DynamoDB write wakes its run's watchers."""
        if not self._watchers:
            return
        target = request.headers.get("X-Amz-Target") or b""
        target = target.decode() if isinstance(target, bytes) else str(target)
        if target.startswith("DynamoDB"):
            body = request.body or b""
            self.request_served(target, body.encode() if isinstance(body, str) else bytes(body))

    def request_served(self, target: str, body: bytes) -> None:
        if not self._watchers or target.rpartition(".")[2] not in _WRITES:
            return  # nobody watching, or a read: the common cases cost a dict check
        runs = {m.decode() for m in _RUN_KEY.findall(body)}
        with self._changed:
            woken = False
            for run_id in runs & self._watchers.keys():
                self._versions[run_id] += 1
                woken = True
            if woken:
                self._changed.notify_all()


def publishable(items: list[dict[str, Any]], published: int, ended: bool) -> list[dict[str, Any]]:
    """Which history items to publish next, after seq `published`, in slot order.

    Results have reserved slots and land in any order: while the run goes on, stop at the first
    slot still empty, so no item is skipped and none is published twice. Once the run ended,
    nothing more will land: publish the rest (a slot a failed run never filled stays empty).
    """
    ready = []
    for item in sorted(items, key=lambda i: int(i["seq"])):
        seq = int(item["seq"])
        if seq <= published:
            continue
        if not ended and seq != published + 1:
            break
        ready.append(item)
        published = seq
    return ready


def listen(changes: RunChanges) -> None:
    """Tell `changes` about every write from now on (until `stop_listening`)."""
    serial.add_listener(changes.seen)


def stop_listening(changes: RunChanges) -> None:
    serial.remove_listener(changes.seen)


def sse_event(name: str, data: Any, event_id: int | None = None) -> bytes:
    lines = [f"event: {name}"]
    if event_id is not None:
        lines.insert(0, f"id: {event_id}")
    lines.append(f"data: {json.dumps(data)}")  # json.dumps never emits a newline: one data line
    return ("\n".join(lines) + "\n\n").encode()
