import time
from typing import Any

from toolpipe_api_client.api.approvals import approve_approval, list_approvals
from toolpipe_api_client.api.messages import list_messages
from toolpipe_api_client.api.runs import get_run, start_run
from toolpipe_api_client.client import AuthenticatedClient
from toolpipe_api_client.models import (
    ApprovalStatus,
    ApproveRequest,
    RunStatus,
    StartRunRequest,
)


def local_client(api_url: str, caller: str) -> AuthenticatedClient:
    """`toolpipe serve`'s scheme (`localCaller`): the caller's ARN in its header, as is."""
    return AuthenticatedClient(
        base_url=api_url, token=caller, prefix="", auth_header_name="X-Toolpipe-Caller"
    )


def run_approving(client: AuthenticatedClient, request: StartRunRequest) -> tuple[Any, list[Any]]:
    """Start a run, approve each call it waits for, and return the ended run and its history."""
    run_id = start_run.sync(client=client, body=request).run_id
    while (run := get_run.sync(run_id, client=client).run).status == RunStatus.RUNNING:
        if run.waiting_for == "person":  # no need to poll /approvals to know
            for approval in list_approvals.sync(client=client, status=ApprovalStatus.PENDING).approvals:
                if approval.run_id == run_id:
                    approve_approval.sync(approval.approval_id, client=client, body=ApproveRequest())
        time.sleep(0.2)
    history, page = [], list_messages.sync(run_id, client=client)
    history += page.messages  # UserMessageView, AssistantMessageView, ToolResultView: by `kind`
    while page.next_:
        page = list_messages.sync(run_id, client=client, after=history[-1].seq)
        history += page.messages
    return run, history
