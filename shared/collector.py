"""Start-up without Python's cyclic garbage collector.

A process's start-up (a function's imports, the local runtime's start) allocates hundreds of
thousands of objects and keeps nearly all of them: modules, classes, models, moto's services.
The allocations trigger the collector over and over, and each full pass walks the whole heap
built so far to free next to nothing. Measured here, fresh processes, CPU: the tool worker's
handler import 363 -> 333 ms, the orchestrator's 376 -> 339 ms, the API's 500 -> 464 ms, and the
local runtime's import and first start 718 + 317 -> 635 + 250 ms (three full passes).

While paused, reference counting still frees whatever is dropped; only garbage in reference
cycles waits, for the collector's next pass once it is back on.
"""

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused(keep: bool = False) -> Iterator[None]:
    """The collector off for the block, then as it was (left off if someone else turned it off;
    nested blocks turn it back on once, at the outermost).

    `keep`: what the process holds when the block ends well is frozen (`gc.freeze`), to last its
    life. Otherwise, turned back on, the collector's next passes walk all the block made once
    more, on their way to the permanent generation; frozen, no pass walks it again.
    `LocalRuntime`'s stop gives it back (`gc.unfreeze`)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        if keep:
            gc.freeze()
    finally:
        if was_enabled:
            gc.enable()
