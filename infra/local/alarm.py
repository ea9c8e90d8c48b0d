"""An alarm clock for a local worker pool: it rings at each time set, unless that time was
cancelled first.

SQS shows some messages again with no request to announce it: a message received and not
deleted, when its visibility timeout runs out; a send with a delay, when the delay ends; a
message whose visibility was changed, when the new timeout runs out. A pool that knows when
each is due receives then (`infra/local/workers.py`), instead of polling an idle queue on a
timer.
"""

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Hashable


class Alarm:
    """Calls `ring` from a thread of its own once each time set comes, unless it was
    cancelled. Times that come together ring once."""

    def __init__(self, ring: Callable[[], None], name: str) -> None:
        self._ring = ring
        self._changed = threading.Condition()
        self._times: list[tuple[float, int, Hashable | None]] = []  # (when, order, key), a heap
        self._keyed: dict[Hashable, float] = {}  # the times still set, by key
        self._order = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def set(self, seconds: float, key: Hashable | None = None) -> None:
        """Ring in `seconds`; a `key` can cancel it (setting a key again moves its time)."""
        when = time.monotonic() + max(0.0, seconds)
        with self._changed:
            if key is not None:
                self._keyed[key] = when
            heapq.heappush(self._times, (when, next(self._order), key))
            if self._times[0][0] == when:  # the earliest now: the thread waits for it instead
                self._changed.notify()

    def cancel(self, key: Hashable) -> None:
        with self._changed:
            self._keyed.pop(key, None)  # its entry is skipped when it comes up

    def pending(self) -> int:
        """How many times are still set (for tests)."""
        with self._changed:
            self._drop_cancelled()
            return len(self._times)

    def _drop_cancelled(self) -> None:
        while self._times:
            when, _, key = self._times[0]
            if key is None or self._keyed.get(key) == when:
                return
            heapq.heappop(self._times)

    def _run(self) -> None:
        while True:
            with self._changed:
                while True:
                    if self._stopped:
                        return
                    self._drop_cancelled()
                    if self._times:
                        wait = self._times[0][0] - time.monotonic()
                        if wait <= 0:
                            break
                        self._changed.wait(wait)
                    else:
                        self._changed.wait()
                now = time.monotonic()
                while self._times and self._times[0][0] <= now:
                    when, _, key = heapq.heappop(self._times)
                    if key is not None and self._keyed.get(key) == when:
                        del self._keyed[key]
            self._ring()  # outside the lock: the pool's wake-up takes its own
