"""What the local runtime changes in its own process, with one lifecycle.

The runtime replaces a few attributes of other modules while it is up (moto's Lambda invoke,
botocore's API call, `os.environ`). Several runtimes may be up in one process
(nested in a test, one after another): the first installs, the last puts back. `install` returns
the undo of that one install, which `LocalRuntime` keeps with its others and runs once when it
stops.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Patched:
    """Attributes replaced while any runtime is up: `(owner, name, replacement)` each; a
    replacement may be a function of the original (`wrap`) when it calls it."""

    replacements: list[tuple[Any, str, Any]]
    wrap: bool = False
    _users: int = 0
    _originals: list[Any] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def install(self) -> Callable[[], None]:
        with self._lock:
            self._users += 1
            if self._users == 1:
                self._originals = [getattr(owner, name) for owner, name, _ in self.replacements]
                for (owner, name, replacement), original in zip(
                    self.replacements, self._originals, strict=True
                ):
                    setattr(owner, name, replacement(original) if self.wrap else replacement)
        undone = False

        def undo() -> None:
            nonlocal undone
            with self._lock:
                if undone:
                    return
                undone = True
                self._users -= 1
                if self._users == 0:
                    for (owner, name, _), original in zip(self.replacements, self._originals, strict=True):
                        setattr(owner, name, original)

        return undo

    @property
    def installed(self) -> bool:
        return self._users > 0
