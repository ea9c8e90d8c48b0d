from shared.history.store import DynamoHistoryStore, HistoryStore

__all__ = ["DynamoHistoryStore", "HistoryStore"]
