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
import logging
import threading
import time
from collections.abc import Callable, Hashable

# The longest a time may be set ahead: SQS's longest visibility timeout (12 hours). A request
# asking more is refused by SQS, but its time would still be set (`threading`'s waits overflow
# past ~292 years).
LONGEST_SECONDS = 12 * 60 * 60.0


class Alarm:
    """Calls `ring` from a thread of its own once for each time set that comes, unless it was
    cancelled, and every `period` seconds if one is given."""

    def __init__(self, ring: Callable[[], None], name: str, period: float | None = None) -> None:
        self._ring = ring
        self._period = None if period is None else min(max(period, 0.001), LONGEST_SECONDS)
        self._next_period = float("inf")
        self._changed = threading.Condition()
        self._times: list[tuple[float, int, Hashable | None]] = []  # (when, order, key), a heap
        self._keyed: dict[Hashable, float] = {}  # the times still set, by key
        self._unkeyed = 0  # the times set without a key, still to come
        self._order = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        if self._period is not None:
            self._next_period = time.monotonic() + self._period
        self._thread.start()

    def stop(self) -> None:
        with self._changed:
            self._stopped = True
            self._changed.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def set(self, seconds: float, key: Hashable | None = None) -> None:
        """Ring in `seconds` (at most `LONGEST_SECONDS`); a `key` can cancel it (setting a key
        again moves its time)."""
        seconds = min(max(0.0, seconds), LONGEST_SECONDS) if seconds == seconds else 0.0  # NaN: now
        when = time.monotonic() + seconds
        with self._changed:
            if key is not None:
                self._keyed[key] = when
            else:
                self._unkeyed += 1
            heapq.heappush(self._times, (when, next(self._order), key))
            if self._times[0][0] == when:  # the earliest now: the thread waits for it instead
                self._changed.notify()

    def cancel(self, key: Hashable) -> None:
        with self._changed:
            if self._keyed.pop(key, None) is None:
                return
            # Its entry stays in the heap, skipped when it comes up; once most entries are
            # cancelled ones (a message taken and deleted: each held for its visibility timeout,
            # its receipt handle with it), the heap is rebuilt of the live ones.
            if len(self._times) > 64 and len(self._times) > 2 * self._live():
                self._times = [entry for entry in self._times if self._is_live(entry)]
                heapq.heapify(self._times)

    def pending(self) -> int:
        """How many times are still set (for tests)."""
        with self._changed:
            return self._live()

    def _live(self) -> int:
        # A key set again has one live entry and stale ones: the keys are what is live.
        return len(self._keyed) + self._unkeyed

    def _is_live(self, entry: tuple[float, int, Hashable | None]) -> bool:
        when, _, key = entry
        return key is None or self._keyed.get(key) == when

    def _drop_cancelled(self) -> None:
        while self._times and not self._is_live(self._times[0]):
            heapq.heappop(self._times)

    def _run(self) -> None:
        while True:
            with self._changed:
                while True:
                    if self._stopped:
                        return
                    self._drop_cancelled()
                    due = min(self._times[0][0] if self._times else float("inf"), self._next_period)
                    wait = due - time.monotonic()
                    if wait <= 0:
                        break
                    self._changed.wait(min(wait, LONGEST_SECONDS))
                now = time.monotonic()
                rings = 0  # one for each time that came: each may be a message of its own
                while self._times and self._times[0][0] <= now:
                    entry = heapq.heappop(self._times)
                    if entry[2] is None:
                        self._unkeyed -= 1
                    elif self._is_live(entry):
                        del self._keyed[entry[2]]
                    else:
                        continue
                    rings += 1
                if self._period is not None and self._next_period <= now:
                    self._next_period = now + self._period
                    rings += 1
            for _ in range(rings):
                try:
                    self._ring()  # outside the lock: the pool's wake-up takes its own
                except Exception:  # the alarm outlives a ring that failed: the next ones still come
                    logging.getLogger(__name__).exception("%s: ringing failed", self._thread.name)
