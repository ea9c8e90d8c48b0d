"""Human approval of tool calls: a call whose tool requires it waits on a Step Functions task
token until a person approves or denies it (or it expires). The state machine enforces the
wait; this package keeps the record, decides once, and tells the worker what was approved."""

from toolpipe.shared.approvals.hashing import arguments_hash
from toolpipe.shared.approvals.models import (
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
