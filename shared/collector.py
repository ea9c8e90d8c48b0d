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
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

# Set where a process is a Lambda function's (Lambda, SAM's emulator); Powertools reads it the
# same way (shared/tracing.py).
ON_LAMBDA = "LAMBDA_TASK_ROOT"


@contextmanager
def paused(keep: bool = False) -> Iterator[None]:
    """The collector off for the block, then as it was (left off if someone else turned it off;
    nested blocks turn it back on once, at the outermost).

    `keep`: what the process holds when the block ends well is frozen (`gc.freeze`), to last its
    life. Otherwise, turned back on, the collector's next passes walk all the block made once
    more, on their way to the permanent generation; frozen, no pass walks it again. Frozen too
    is any garbage in cycles that waited: only for what lasts the process's life (a cold start),
    or until whoever froze it gives it back (`LocalRuntime`'s stop: `gc.unfreeze`)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        if keep:
            gc.freeze()
    finally:
        if was_enabled:
            gc.enable()


def cold_start() -> AbstractContextManager[None]:
    """A Lambda handler module's set-up: paused, and on Lambda (`ON_LAMBDA`) kept, as it lasts
    the execution environment's life. Elsewhere (the local runtime, a test, `make openapi`) the
    process goes on to other work, and freezing would keep whatever garbage waited for good: only
    paused there."""
    return paused(keep=bool(os.environ.get(ON_LAMBDA)))
