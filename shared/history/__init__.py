"""Where a run is kept: its record, its history (one item per message), the tool-call ledger and
the state tools share, behind small ports (`ports.py`), on DynamoDB and S3 (`store.py` and its
parts) or in memory for unit tests (`memory.py`); when an ended run expires (`retention.py`)."""

from toolpipe.shared.history.memory import MemoryHistoryStore
from toolpipe.shared.history.ports import CallRead, Claim, ClaimState, HistoryStore
from toolpipe.shared.history.store import DynamoHistoryStore

__all__ = ["CallRead", "Claim", "ClaimState", "DynamoHistoryStore", "HistoryStore", "MemoryHistoryStore"]
