from shared.history.memory import MemoryHistoryStore
from shared.history.ports import CallRead, Claim, ClaimState, HistoryStore
from shared.history.store import DynamoHistoryStore

__all__ = ["CallRead", "Claim", "ClaimState", "DynamoHistoryStore", "HistoryStore", "MemoryHistoryStore"]
