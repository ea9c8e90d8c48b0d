"""Each local function is itself: its own environment and its own role, in one process.

On Lambda every function has its own environment variables and its own credentials. Locally the
handlers run in-process, so the function an invocation belongs to is carried in a context
variable, entered by `infra/local/lambdas.py` for the length of each invocation:

- `os.environ` is replaced, while a runtime is up, by a view that answers toolpipe's variables
  (every name some function's template environment sets, and the runtime's own) from the
  current function's environment alone, and every other name (PATH, HOME, your tools' own
  settings) from the process's, as a deployer's additions would reach the function. Outside an
  invocation (the CLI, the runtime itself, tests) it is the process's environment, unchanged.
- threads a function starts inherit its context (Python 3.11's threads start in an empty one):
  a tool's timeout thread, a heartbeat, a thread of the tool's own all act as the function.
  Installed once a process, never undone (`caller.threads_inherit`).
- `infra/local/iam.py` authorizes each AWS call made in a function's context against its role.
"""

import os
from collections.abc import Callable, ItemsView, Iterator, MutableMapping

from toolpipe.infra.local.caller import FunctionContext, current, running_as, threads_inherit
from toolpipe.infra.local.caller import _current as _current
from toolpipe.infra.local.process_patch import Patched


class FunctionEnviron(MutableMapping[str, str]):
    """`os.environ` while a runtime is up: the current function's view of it."""

    def __init__(self, process: MutableMapping[str, str]) -> None:
        self.process = process

    def _own(self, name: str) -> dict[str, str] | None:
        """The environment that answers `name` for the running function, or None for the
        process's: its own for what it set or the template set, the process's for the rest."""
        context = _current.get()
        if context is None:
            return None
        if name in context.passthrough and name in self.process:
            return None
        if name in context.environment or name in context.owned:
            return context.environment
        return None

    def __getitem__(self, name: str) -> str:
        own = self._own(name)
        return own[name] if own is not None else self.process[name]

    def __setitem__(self, name: str, value: str) -> None:
        # A function's writes are its own, as on Lambda, where each runs in a sandbox of its own.
        context = _current.get()
        if context is not None:
            context.environment[name] = value
        else:
            self.process[name] = value

    def __delitem__(self, name: str) -> None:
        own = self._own(name)
        if own is not None:
            del own[name]
        else:
            del self.process[name]

    def __iter__(self) -> Iterator[str]:
        context = _current.get()
        if context is None:
            yield from self.process
            return
        yield from (
            name for name in self.process if name not in context.owned and name not in context.environment
        )
        yield from context.environment

    def __contains__(self, name: object) -> bool:
        # Without the mixin's `self[name]` and its KeyError for each absent name: botocore asks
        # for ~50 absent ones as it builds each client.
        if not isinstance(name, str):
            raise TypeError(f"str expected, not {type(name).__name__}")  # as os.environ says
        own = self._own(name)
        return name in (own if own is not None else self.process)

    def items(self) -> ItemsView[str, str]:
        return _Items(self)

    def __len__(self) -> int:
        return len(self.copy())

    def copy(self) -> dict[str, str]:
        """Every name and value as the current function sees them, read in one pass: what
        iterating `items()` costs (botocore reads the proxy settings so, four passes over the
        whole environment, for each client it builds: ~16 clients a runtime)."""
        process = dict(self.process)
        context = _current.get()
        if context is None:
            return process
        # A copy first: another thread of the function may set a variable meanwhile.
        environment = dict(context.environment)
        seen = {
            name: value
            for name, value in process.items()
            if name not in context.owned and name not in environment
        }
        for name, value in environment.items():
            seen[name] = process[name] if name in context.passthrough and name in process else value
        return seen

    def __repr__(self) -> str:
        return f"FunctionEnviron({self.copy()!r})"


class _Items(ItemsView[str, str]):
    """`os.environ.items()` while a runtime is up: as the mixin's, each pair as `environ[name]`
    answers it, but read in one pass when iterated (`FunctionEnviron.copy`)."""

    _mapping: FunctionEnviron

    def __iter__(self) -> Iterator[tuple[str, str]]:
        yield from self._mapping.copy().items()


_PATCHED = Patched([(os, "environ", FunctionEnviron)], wrap=True)


def install() -> Callable[[], None]:
    """Per-function environments until the last runtime's undo, and inherited contexts for
    good (`caller.threads_inherit`: a function's thread may outlive its runtime)."""
    threads_inherit()
    return _PATCHED.install()


__all__ = ["FunctionContext", "FunctionEnviron", "current", "install", "running_as"]
