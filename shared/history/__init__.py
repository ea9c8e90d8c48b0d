from toolpipe.shared.history.memory import MemoryHistoryStore
from toolpipe.shared.history.ports import CallRead, Claim, ClaimState, HistoryStore
from toolpipe.shared.history.store import DynamoHistoryStore

__all__ = ["CallRead", "Claim", "ClaimState", "DynamoHistoryStore", "HistoryStore", "MemoryHistoryStore"]
