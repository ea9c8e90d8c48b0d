"""What the deferred calls need from outside: their records (`DynamoApprovalStore` the adapter)
and the waiting tasks they answer (Step Functions')."""

import builtins
from typing import Any, Protocol

from toolpipe.shared.deferred.models import Approval, ApprovalStatus, EditedArguments, Gate
from toolpipe.shared.history.ports import Contents, History, RunRecords


class ApprovalRecords(Protocol):
    def create(self, approval: Approval, token: str) -> Approval:
        """Store `approval` for its call with the waiting task's token; when the call has an
        approval already, keep that one (giving it `token` while pending) and return it."""
        ...

    def get(self, approval_id: str) -> Approval:
        """The approval, or `ApprovalNotFoundError`."""
        ...

    def get_token(self, approval_id: str) -> str | None:
        """The token of the task that waits on the approval: read only to answer it."""
        ...

    def get_gate(self, run_id: str, seq: int) -> Gate | None:
        """The call's gate, None for a call that needed no approval."""
        ...

    def decide(
        self,
        approval: Approval,
        status: ApprovalStatus,
        by: str | None,
        reason: str | None = None,
        from_status: ApprovalStatus = ApprovalStatus.PENDING,
        arguments: EditedArguments | None = None,
        answer: str | None = None,
    ) -> Approval:
        """Move an approval (and its gate) from `from_status` (pending) to `status`;
        `ApprovalAlreadyDecidedError`, with nothing written, when it is no longer in it.
        `arguments`: approved with these instead of the model's (kept on record and gate); a
        decision taken back to pending drops them. `answer`: a deferred call's answer preview."""
        ...

    def reopen(self, approval: Approval) -> Approval:
        """Take `approval`'s decision (or answer) back to pending, as if never made: its run
        could not be told. `ApprovalAlreadyDecidedError` when it moved on since."""
        ...

    def set_delivery_uncertain(self, approval_id: str, uncertain: bool) -> None:
        """Mark (or clear) a decided approval whose task may not have heard it."""
        ...

    def list(self, requester: str | None, status: ApprovalStatus | None) -> list[Approval]:
        """`requester`'s approvals, newest first (None: everyone's)."""
        ...

    def for_run(self, run_id: str, limit: int) -> "builtins.list[Approval]":
        """The approvals of the run's calls (one per gated call slot, in slot order), at most
        `limit`: what the run's timeline shows as waits."""
        ...

    def waiting(self, run_id: str) -> "builtins.list[Approval]":
        """The run's calls that wait now (pending), in slot order: who the run waits for."""
        ...


class RunsAndHistory(RunRecords, History, Contents, Protocol):
    """The run record (who may decide, whether the run still goes on), the call's reply, and
    where a deferred call's answer goes (its slot; a long one's whole text in S3)."""


class ApprovalTasks(Protocol):
    """Answers a gated call's waiting task. Both return False when it no longer waits."""

    def succeed(self, token: str, output: dict[str, Any]) -> bool: ...

    def fail(self, token: str, error: str, cause: str) -> bool: ...
