"""One way a tool result enters a run's history, whoever writes it (the model step, a deferred
call's answer, a child run's ending): written to its call's slot and announced once
(`ToolCallCompleted`); or, when the slot is taken, the result already there read back, since
the first result written stands (a retry, a racing worker or answer). The worker's own results
go in with the call's ledger entry, in one transaction (`shared/runs/tool_executor.py`)."""

from dataclasses import dataclass
from typing import Protocol

from toolpipe.shared.history.ports import Contents
from toolpipe.shared.messages import HistoryItem, RunRecord, ToolResult
from toolpipe.shared.runs.events import EventPublisher


class ResultSlots(Protocol):
    def append(self, run_id: str, item: HistoryItem) -> bool: ...

    def get_item(self, run_id: str, seq: int) -> HistoryItem | None: ...


@dataclass(frozen=True)
class Recorded:
    """The result in the call's slot: this write's (`written`), or the one that was there."""

    result: ToolResult
    written: bool


class ResultRecorder:
    def __init__(self, slots: ResultSlots, events: EventPublisher) -> None:
        self._slots = slots
        self._events = events

    def record(self, run: RunRecord, result: ToolResult) -> Recorded:
        """Write `result` to its slot and announce it; if the slot is taken, the stored result."""
        if self._slots.append(run.run_id, result):
            self._events.tool_call_completed(run, result)
            return Recorded(result, written=True)
        stored = self._slots.get_item(run.run_id, result.seq)
        # A call's slot only ever holds its result: anything else is a corrupt history.
        assert isinstance(stored, ToolResult), f"call slot {result.seq} of run {run.run_id} holds no result"
        return Recorded(stored, written=False)


def whole_text(contents: Contents, shown: str | None, ref: str | None) -> str | None:
    """The whole text of a result or a run's output, where the model (or a reader) was shown
    its beginning (`shown`) and the whole went to S3 (`ref`)."""
    return contents.get_result(ref) if ref else shown


def whole_result(contents: Contents, result: ToolResult) -> str:
    """The whole text of a tool result (see `whole_text`)."""
    return whole_text(contents, result.content, result.full_result_ref) or ""
