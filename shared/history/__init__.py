from shared.history.memory import MemoryHistoryStore
from shared.history.ports import Claim, ClaimState, HistoryStore
from shared.history.store import DynamoHistoryStore

__all__ = ["Claim", "ClaimState", "DynamoHistoryStore", "HistoryStore", "MemoryHistoryStore"]
