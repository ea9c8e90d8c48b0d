"""What a tool may know about the call it serves. Injected, never in the schema."""

from dataclasses import dataclass, field
from typing import Any


class RunState(dict[str, Any]):
    """Per-run key/value state a tool can read and write; values must be JSON-serialisable.

    Writes are tracked so the worker stores only the keys this call changed: parallel calls
    that touch different keys do not overwrite each other.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.changed: set[str] = set()

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self.changed.add(key)


@dataclass(frozen=True)
class ToolContext:
    run_id: str
    agent: str
    call_id: str
    caller: str | None = None
    state: RunState = field(default_factory=RunState)
