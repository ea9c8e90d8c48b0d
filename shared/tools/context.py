"""What a tool may know about the call it serves. Injected, never in the schema."""

import json
from dataclasses import dataclass, field
from typing import Any

from toolpipe.shared.messages import InputObject


class RunState(dict[str, Any]):
    """Per-run key/value state a tool can read and write; values must be JSON-serialisable.

    What changed is found by comparing each key's JSON with the state as loaded, so every
    way of changing a dict counts (assignment, update, setdefault, del, mutating a value in
    place), and the worker stores only those keys: parallel calls that touch different keys
    do not overwrite each other.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaded = {key: json.dumps(value, sort_keys=True) for key, value in self.items()}
        self._abandoned = False

    def abandon(self) -> None:
        """Keep none of this call's changes: an attempt of it timed out and may still be running,
        writing (a later attempt's writes would mix with its late ones)."""
        self._abandoned = True

    def changes(self) -> tuple[dict[str, Any], list[str]]:
        """(keys set or changed with their values, keys removed); none once abandoned."""
        if self._abandoned:
            return {}, []
        changed = {
            key: value
            for key, value in self.items()
            if self._loaded.get(key) != json.dumps(value, sort_keys=True)
        }
        removed = [key for key in self._loaded if key not in self]
        return changed, removed


@dataclass
class ToolActions:
    """What a tool asks of the run besides its result, as ADK's `tool_context.actions`:
    `transfer_to_agent = "billing"` continues the run under that agent from the next turn;
    `escalate = True` gives the run back to the agent that handed off to this one (or ends the
    run with this call's result when none did). Honoured only when the call succeeds; the first
    call of a turn (in call order) that asks wins."""

    transfer_to_agent: str | None = None
    escalate: bool = False


@dataclass(frozen=True)
class ToolContext:
    run_id: str
    agent: str
    call_id: str
    caller: str | None = None
    state: RunState = field(default_factory=RunState)
    # The same for every delivery and retry of this call, and different for every other call:
    # pass it downstream (as Stripe's `Idempotency-Key`) so a repeated request has one effect.
    idempotency_key: str = ""
    # The S3 object the run was started for (S3 trigger), read through `read_input`.
    input_object: InputObject | None = None
    # A presigned GET of that object, valid while the call runs: the runner's role reads no
    # input, so a tool reads its own run's file through this link and no other.
    input_link: str | None = None
    actions: ToolActions = field(default_factory=ToolActions)

    def __post_init__(self) -> None:
        if not self.idempotency_key:
            object.__setattr__(self, "idempotency_key", f"{self.run_id}:{self.call_id}")
