"""`toolpipe serve` follows your app: when its files change, it is imported again between model
steps, and each runner's next tool call starts in a process that imports it anew.

A model step in progress finishes with the agents it started with (`StepGate`: a reload waits
for the steps running, and the next ones wait for it); a tool call in progress finishes in the
process it started in. Each history item says which version of the app made it (`app_version`:
a hash of its files, `shared/app_ref.py`). An app that fails to import is said in one line
(which module, why, where) on the server's console and to whoever starts a run then; the agents
loaded before stay until a save fixes it.
"""

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from toolpipe.shared.agents import AGENTS, all_agents
from toolpipe.shared.agents.app import loaded_version, reload_app
from toolpipe.shared.app_ref import app_files, files_signature, find_app
from toolpipe.shared.errors import ConfigurationError, DefinitionError

if TYPE_CHECKING:
    from toolpipe.infra.local.runtime import LocalRuntime

log = logging.getLogger(__name__)

# How often the app's files are looked at (their modification times and sizes only).
POLL_SECONDS = 0.2


class StepGate:
    """Model steps run together under it; a reload waits until none runs, and holds new ones
    back meanwhile. A step that starts another in its own thread is let in (no deadlock)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._steps = 0
        self._reloading = False
        self._inside = threading.local()

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        depth = getattr(self._inside, "depth", 0)
        with self._changed:
            if not depth:
                self._changed.wait_for(lambda: not self._reloading)
            self._steps += 1
        self._inside.depth = depth + 1
        try:
            yield
        finally:
            self._inside.depth = depth
            with self._changed:
                self._steps -= 1
                self._changed.notify_all()

    @contextlib.contextmanager
    def reload(self) -> Iterator[None]:
        with self._changed:
            self._reloading = True
            self._changed.wait_for(lambda: not self._steps)
        try:
            yield
        finally:
            with self._changed:
                self._reloading = False
                self._changed.notify_all()


STEPS = StepGate()


class AppReloader:
    """`with AppReloader(runtime, say):` the app loaded now, and again whenever its files change.

    Args:
        runtime: The started runtime whose tool runners import the app.
        say: Where a line for the person watching goes (the server's console).
        poll_seconds: How often the files are looked at.
    """

    def __init__(
        self, runtime: "LocalRuntime", say: Callable[[str], None], poll_seconds: float = POLL_SECONDS
    ) -> None:
        self._runtime = runtime
        self._say = say
        self._poll = poll_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="app-reload", daemon=True)
        self._signature: tuple[tuple[str, int, int], ...] = ()
        self._error: str | None = None
        self.reloads = 0

    @property
    def error(self) -> str | None:
        """Why the app on disk cannot be loaded (one line), or None."""
        return self._error

    @property
    def version(self) -> str | None:
        """The version of the app loaded (a hash of its files)."""
        return loaded_version()

    def __enter__(self) -> "AppReloader":
        self._signature = self._files()
        try:
            all_agents()
        except (ConfigurationError, DefinitionError) as e:
            self._failed(e)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _files(self) -> tuple[tuple[str, int, int], ...]:
        ref = find_app()
        return files_signature(app_files(ref)) if ref is not None else ()

    def _watch(self) -> None:
        while not self._stop.wait(self._poll):
            try:
                signature = self._files()
            except ConfigurationError:
                continue  # pyproject.toml half-saved: looked at again next time
            if signature != self._signature:
                changed = _changed(self._signature, signature)
                self._signature = signature
                self.reload(changed)

    def reload(self, changed: list[str]) -> None:
        """Import the app again, between model steps, and renew the tool runners' templates."""
        started = time.monotonic()
        with STEPS.reload():
            try:
                version = reload_app(AGENTS)
            except (ConfigurationError, DefinitionError) as e:
                self._failed(e)
                return
            self._runtime.renew_tool_processes()
        self._error = None
        self.reloads += 1
        what = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        self._say(
            f"toolpipe: reloaded your app (version {version}) after a change to {what or 'its files'} "
            f"in {time.monotonic() - started:.2f} s"
        )
        log.info("app reloaded", extra={"app_version": version})

    def _failed(self, error: Exception) -> None:
        self._error = str(error)
        self._say(f"toolpipe: error: {error} (runs are refused until you fix it; saving reloads it)")
        log.warning("app cannot be loaded", extra={"reason": str(error)})


def _changed(before: tuple[tuple[str, int, int], ...], after: tuple[tuple[str, int, int], ...]) -> list[str]:
    """The files added, removed or changed between two signatures, by name."""
    old, new = {f[0]: f[1:] for f in before}, {f[0]: f[1:] for f in after}
    return sorted(os.path.relpath(n) for n in old.keys() | new.keys() if old.get(n) != new.get(n))
