"""Where a run is kept: its record, its history (one item per message), the tool-call ledger and
the state tools share, behind small ports (`ports.py`), on DynamoDB and S3 (`store.py` and its
parts) or in memory for unit tests (`memory.py`); when an ended run expires (`retention.py`)."""

from typing import TYPE_CHECKING, Any

from toolpipe.shared.history.ports import CallRead, Claim, ClaimState, HistoryStore
from toolpipe.shared.history.store import DynamoHistoryStore

if TYPE_CHECKING:
    from toolpipe.shared.history.memory import MemoryHistoryStore

__all__ = ["CallRead", "Claim", "ClaimState", "DynamoHistoryStore", "HistoryStore", "MemoryHistoryStore"]


def __getattr__(name: str) -> Any:
    # The in-memory store is for tests: a function's cold start does not import it.
    if name == "MemoryHistoryStore":
        from toolpipe.shared.history.memory import MemoryHistoryStore

        return MemoryHistoryStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
