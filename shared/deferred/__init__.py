"""Deferred calls: a tool call that waits on a Step Functions task token for someone outside the
run. One concept, three kinds (`ApprovalKind`): a person's approval of the call, a person's
answer in its place, and the result of the caller's own program. The state machine enforces
the wait; this package holds the record and its store (`models.py`, `store.py`), the API's
bodies (`bodies.py`), the signed links (`links.py`), the answers' shapes (`answers.py`) and the
hashes that pin what was approved (`hashing.py`). Deciding one is a run service: `shared/runs/deferred.py`."""

from toolpipe.shared.deferred.hashing import arguments_hash
from toolpipe.shared.deferred.models import (
    Approval,
    ApprovalAlreadyDecidedError,
    ApprovalNotFoundError,
    ApprovalStatus,
    Gate,
)

__all__ = [
    "Approval",
    "ApprovalAlreadyDecidedError",
    "ApprovalNotFoundError",
    "ApprovalStatus",
    "Gate",
    "arguments_hash",
]
