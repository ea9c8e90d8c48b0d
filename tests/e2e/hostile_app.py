"""An app of misbehaving tools for `toolpipe serve --app tests.e2e.hostile_app` (issue 18).

Each tool appends `start <name>` to the file `HOSTILE_MARKS` names when its body starts, so a
test counts, across threads and processes, how often a side effect really began.
"""

import asyncio
import contextlib
import os
import sys
import threading
import time

from toolpipe.shared.agents import Agent
from toolpipe.shared.tools import tool

MARKS_ENV = "HOSTILE_MARKS"
_lock = threading.Lock()


def mark(name: str) -> None:
    with _lock, open(os.environ[MARKS_ENV], "a", encoding="utf-8") as marks:
        marks.write(f"start {name}\n")


@tool(timeout_seconds=1, retry_on=(Exception,), max_retries=2, retry_backoff_seconds=0.1)
def charge_slowly() -> str:
    """Charge a card; slower than its timeout, and it retries on any exception."""
    mark("charge_slowly")
    time.sleep(1.5)
    return "charged"


@tool
def exits() -> str:
    """Parse a command line the way argparse does on an error: exit the process."""
    mark("exits")
    sys.exit(2)


@tool(timeout_seconds=1)
def hangs() -> str:
    """Wait for an answer that never comes; has a timeout."""
    mark("hangs")
    time.sleep(3600)
    return "never"


@tool
def hangs_without_timeout() -> str:
    """Wait for an answer that never comes; no timeout of its own."""
    mark("hangs_without_timeout")
    time.sleep(3600)
    return "never"


class _Unreadable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message for you")


@tool
def unreadable() -> str:
    """Fail with an error whose message itself fails."""
    mark("unreadable")
    raise _Unreadable()


@tool
def shouts() -> str:
    """Print 100 MB to stdout, then answer."""
    mark("shouts")
    line = "x" * 1023 + "\n"
    for _ in range(100 * 1024):
        sys.stdout.write(line)
    return "shouted"


@tool
def leaves_a_thread() -> str:
    """Start a thread of its own that never ends (not a daemon), and answer."""
    mark("leaves_a_thread")
    threading.Thread(target=time.sleep, args=(3600,), name="left-by-a-tool", daemon=False).start()
    return "left"


@tool
def own_timeout() -> str:
    """Fail with the builtin TimeoutError of its own (an upstream that timed out), at once."""
    mark("own_timeout")
    raise TimeoutError("the upstream took too long")


@tool(timeout_seconds=1)
async def ignores_cancel() -> str:
    """A coroutine that swallows its cancellation and keeps going."""
    mark("ignores_cancel")
    for _ in range(3600):
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(1)
    return "never"


@tool
def circular() -> dict[str, object]:
    """Answer with a value that refers to itself (cannot be written as JSON)."""
    mark("circular")
    answer: dict[str, object] = {}
    answer["self"] = answer
    return answer


@tool
def moves_away() -> str:
    """Change the process's working directory (a library that chdirs and never returns)."""
    mark("moves_away")
    os.chdir(os.environ.get("TMPDIR", "/tmp"))
    return "moved"


@tool
def closes_stdout() -> str:
    """Close stdout, as a careless library's cleanup does."""
    mark("closes_stdout")
    sys.stdout.close()
    return "closed"


@tool
def quick() -> str:
    """Answer at once."""
    mark("quick")
    return "quick answer"


HOSTILE = Agent(
    name="hostile",
    instructions="You call the tool the prompt names.",
    tools=[
        charge_slowly,
        exits,
        hangs,
        hangs_without_timeout,
        unreadable,
        shouts,
        leaves_a_thread,
        own_timeout,
        ignores_cancel,
        circular,
        moves_away,
        closes_stdout,
        quick,
    ],
    # No default timeout: a tool without its own gets its worker's time, as on Lambda.
    tool_timeout_seconds=None,
    max_iterations=3,
)
