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

import functools
import gc
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

# Set where a process is a Lambda function's (Lambda, SAM's emulator); Powertools reads it the
# same way (shared/tracing.py).
ON_LAMBDA = "LAMBDA_TASK_ROOT"

# Local runtimes up that give back what cold starts freeze when they stop (`keep_cold_starts`).
_keepers = 0
_keepers_lock = threading.Lock()


# Blocks in progress, on any thread: the collector is process-wide, so it is turned off by the
# first block to start and back on by the last to end, as it was before the first.
_blocks = 0
_was_enabled = False
_blocks_lock = threading.Lock()


@contextmanager
def paused(keep: bool = False, collect: bool = False) -> Iterator[None]:
    """The collector off for the block, then as it was (left off if someone else turned it off).
    Blocks overlap on threads (a local runtime's functions start cold at once): it is back on
    when the last one ends, never under one still running.

    `keep`: what the process holds when the block ends well is frozen (`gc.freeze`), to last its
    life. Otherwise, turned back on, the collector's next passes walk all the block made once
    more, on their way to the permanent generation; frozen, no pass walks it again. Frozen too
    is any garbage in cycles that waited, unless `collect`: a full pass as the block starts,
    which frees what waited from before (cheap where that is frozen already: ~5 ms before the
    local runtime's import, where one after it walks all it made, ~90 ms); only what is dropped
    in the block itself, on any thread, is kept with it. Kept only for what lasts the process's
    life, or until whoever froze it gives it back (`LocalRuntime`'s stop: `gc.unfreeze`)."""
    global _blocks, _was_enabled
    with _blocks_lock:
        if _blocks == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _blocks += 1
    try:
        if keep and collect:
            gc.collect()
        yield
        if keep:
            gc.freeze()
    finally:
        with _blocks_lock:
            _blocks -= 1
            if _blocks == 0 and _was_enabled:
                gc.enable()


def cold_start(collect: bool = False) -> AbstractContextManager[None]:
    """A Lambda handler module's set-up: paused, and on Lambda (`ON_LAMBDA`) kept, as it lasts
    the execution environment's life. Kept too while a local runtime is up, which gives it back
    when it stops (`keep_cold_starts`). Elsewhere (a test, `make openapi`) the process goes on to
    other work, and freezing would keep whatever garbage waited for good: only paused there.
    `collect`: a full pass first, for a build at a function's first call (or hours later, the
    API's first fork): what waited then is freed, not kept with what is built."""
    return paused(keep=bool(os.environ.get(ON_LAMBDA)) or _keepers > 0, collect=collect)


def keep_cold_starts() -> Callable[[], None]:
    """Cold starts are kept (frozen) from now on, as on Lambda, until the returned undo: for a
    local runtime, whose stop gives everything frozen back to the collector (`gc.unfreeze`)."""
    global _keepers
    with _keepers_lock:
        _keepers += 1

    def undo() -> None:
        global _keepers
        with _keepers_lock:
            _keepers -= 1

    return undo


def _built_cold(build: Callable[P, T]) -> Callable[P, T]:
    """`build`, run as a cold start that collects first (`cold_start(collect=True)`)."""

    @functools.wraps(build)
    def built(*args: P.args, **kwargs: P.kwargs) -> T:
        with cold_start(collect=True):
            return build(*args, **kwargs)

    return built


def cold_built(build: Callable[[], T]) -> Callable[[], T]:
    """`functools.cache` for what a handler builds at its first call, built as its cold start
    (`cold_start`): its clients (botocore's service models), the orchestrator's `openai` package.
    Built with the collector on, it was left young, and the passes of the invocation walked it:
    the orchestrator's first call took 358 ms of CPU, 306 now, and 200,000 allocations after it
    142 ms, 33 now (docs/benchmarks.md, "Cold start")."""
    return functools.cache(_built_cold(build))


class cold_property(functools.cached_property[T]):
    """`functools.cached_property` for a service built at its first use (`cold_built`)."""

    def __init__(self, func: Callable[[Any], T]) -> None:
        super().__init__(_built_cold(func))
