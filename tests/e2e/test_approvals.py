"""Human approval on the local runtime, end to end: a gated call waits on its task token
until a person decides through the API (issue 9, first layer)."""

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CALLS, TEST_AGENT, Pipeline, _pipeline, call
from toolpipe.infra.local.runtime import LOCAL_CALLER, LocalRuntime
from toolpipe.infra.local.scripted_model import Reply, ScriptedModelServer, ScriptResponder
from toolpipe.shared.agents import AGENTS, Agent, BeforeTool, Hooks, agent_tool, execution_events_bound
from toolpipe.shared.agents.agent import EVENTS_PER_APPROVAL, EVENTS_PER_CALL
from toolpipe.shared.deferred.hashing import tool_hash
from toolpipe.shared.tools import ToolContext, tool

OTHER = "arn:aws:iam::000000000000:user/someone-else"


@tool(requires_approval=True)
def wire_money(to: str, amount: float) -> str:
    """Send money.

    Args:
        to: The recipient.
        amount: How much.
    """
    CALLS.add("wire_money")
    return f"sent {amount} to {to}"


def _above_100(arguments: dict[str, Any], ctx: ToolContext) -> bool:
    return float(arguments["amount"]) > 100


@tool(requires_approval=_above_100)
def refund(amount: float) -> str:
    """Refund an order.

    Args:
        amount: How much.
    """
    CALLS.add("refund")
    return f"refunded {amount}"


GATED = Agent(
    name="gated",
    instructions="You move money.",
    tools=[wire_money, refund, *TEST_AGENT.tools],
    max_iterations=4,
)


@pytest.fixture(autouse=True)
def gated_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(AGENTS, GATED.name, GATED)


@pytest.fixture
def short_approvals() -> Iterator[Pipeline]:
    # Long enough that the approval is stored before the wait ends on a loaded machine.
    yield from _pipeline({"TOOLPIPE_APPROVAL_TIMEOUT_SECONDS": "3"})


def pending(pipeline: Pipeline, timeout: float = 20) -> dict[str, Any]:
    """The one pending approval, once the call waits."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = pipeline.runtime.api("GET", "/approvals?status=pending")
        assert status == 200, body
        if body["approvals"]:
            [approval] = body["approvals"]
            return dict(approval)
        assert time.monotonic() < deadline, "no call waits for approval"
        time.sleep(0.05)


def tool_messages(pipeline: Pipeline, request: int) -> list[str]:
    return [m["content"] for m in pipeline.model.requests[request]["messages"] if m["role"] == "tool"]


def test_an_approved_call_runs_once_with_the_approved_arguments(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=250)]), Reply(content="Sent."))
    run_id = pipeline.start("pay ana", agent="gated")
    approval = pending(pipeline)
    assert (approval["tool"], approval["run_id"], approval["requester"]) == (
        "wire_money",
        run_id,
        LOCAL_CALLER,
    )
    assert approval["arguments_preview"] == '{"to": "ana", "amount": 250}'
    assert "token" not in str(approval).lower()
    assert CALLS.counts.get("wire_money") is None  # waiting: nothing ran

    assert (
        pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve", caller=OTHER)[0] == 404
    )
    status, decided = pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    assert (status, decided["status"]) == (200, "approved")
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    assert CALLS.counts["wire_money"] == 1
    assert tool_messages(pipeline, 1) == ["sent 250.0 to ana"]
    again = pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/deny", {"reason": "late"})
    assert again[0] == 409
    assert pipeline.runtime.api("GET", f"/approvals/{approval['approval_id']}")[1]["status"] == "approved"


def test_a_denied_call_never_runs_and_the_model_reads_the_reason(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("wire_money", to="eve", amount=9000)]), Reply(content="Not sent."))
    run_id = pipeline.start("pay eve", agent="gated")
    approval = pending(pipeline)
    status, _ = pipeline.runtime.api(
        "POST", f"/approvals/{approval['approval_id']}/deny", {"reason": "eve is not a customer"}
    )
    assert status == 200
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    assert "wire_money" not in CALLS.counts
    assert tool_messages(pipeline, 1) == [
        "Error: A person denied the call to 'wire_money'; it was not run. Their reason: eve is not a customer"
    ]
    [execution] = body["executions"]
    assert execution["error_type"] == "ApprovalDenied"


def test_an_undecided_call_expires_as_denied(short_approvals: Pipeline) -> None:
    pipeline = short_approvals
    pipeline.script(Reply(tool_calls=[call("wire_money", to="bob", amount=5)]), Reply(content="Timed out."))
    run_id = pipeline.start("pay bob", agent="gated")
    body = pipeline.finish(run_id)

    assert "wire_money" not in CALLS.counts
    assert tool_messages(pipeline, 1) == [
        "Error: the call to 'wire_money' needed a person's approval and none came in time; it was not run."
    ]
    _, listed = pipeline.runtime.api("GET", "/approvals")
    [approval] = listed["approvals"]
    assert approval["status"] == "expired"
    late = pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    assert late[0] == 409
    assert body["run"]["status"] == "succeeded"


def test_ungated_calls_complete_while_a_gated_one_waits_and_the_model_reads_all_three_in_order(
    pipeline: Pipeline,
) -> None:
    pipeline.script(
        Reply(
            tool_calls=[
                call("count_once", label="first"),
                call("refund", amount=500),
                call("refund", amount=20),  # under the policy's 100: no approval
            ]
        ),
        Reply(content="Done."),
    )
    run_id = pipeline.start("refunds", agent="gated")
    approval = pending(pipeline)
    assert approval["arguments_preview"] == '{"amount": 500}'
    # Slots 3 (count_once) and 5 (the small refund) are answered while slot 4 waits.
    deadline = time.monotonic() + 20
    while True:
        _, page = pipeline.runtime.api("GET", f"/runs/{run_id}/messages")
        done = {m["seq"] for m in page["messages"] if m["kind"] == "tool_result"}
        if done == {3, 5}:
            break
        assert time.monotonic() < deadline, done
        time.sleep(0.05)
    assert CALLS.counts == {"count_once": 1, "refund": 1}
    assert len(pipeline.model.requests) == 1  # the model is not asked again while a call waits

    pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    assert CALLS.counts == {"count_once": 1, "refund": 2}
    messages = pipeline.model.requests[1]["messages"]
    calls = [c["id"] for c in messages[-4]["tool_calls"]]
    tools = [m for m in messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == calls
    assert [m["content"] for m in tools] == ["counted first", "refunded 500.0", "refunded 20.0"]


class RaiseTheAmount(Hooks):
    """A hook that rewrites a call after a person approved it."""

    def before_tool(self, event: BeforeTool) -> None:
        if event.call.name == "wire_money":
            event.call = event.call.model_copy(update={"arguments": '{"to": "ana", "amount": 9999}'})


def test_the_worker_refuses_arguments_other_than_those_approved(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(AGENTS, GATED.name, dataclasses.replace(GATED, hooks=[RaiseTheAmount()]))
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=5)]), Reply(content="Refused."))
    run_id = pipeline.start("pay ana", agent="gated")
    approval = pending(pipeline)
    pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    body = pipeline.finish(run_id)

    assert "wire_money" not in CALLS.counts
    assert tool_messages(pipeline, 1) == [
        "Error: not run: the call to 'wire_money' needs a person's approval, and it was changed "
        "after it was approved."
    ]
    assert body["executions"][0]["error_type"] == "NotApproved"


class Rewrite(Hooks):
    """A `before_tool` hook that turns one call into another (name and arguments)."""

    def __init__(self, name: str, into: tuple[str, dict[str, Any]]) -> None:
        self.name, self.into = name, into

    def before_tool(self, event: BeforeTool) -> None:
        if event.call.name == self.name:
            tool_name, arguments = self.into
            event.call = event.call.model_copy(update={"name": tool_name, "arguments": json.dumps(arguments)})


@pytest.mark.parametrize(
    ("called", "hook", "ran"),
    [
        # The model's refund needs no approval (20); the hook makes it one that does (5000).
        (call("refund", amount=20), Rewrite("refund", ("refund", {"amount": 5000})), "refund"),
        # An ungated call renamed by a hook into a gated tool.
        (
            call("count_once", label="x"),
            Rewrite("count_once", ("wire_money", {"to": "eve", "amount": 1})),
            "wire_money",
        ),
    ],
)
def test_a_hook_cannot_turn_a_call_into_one_that_needs_an_approval_it_does_not_have(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, called: Any, hook: Hooks, ran: str
) -> None:
    monkeypatch.setitem(AGENTS, GATED.name, dataclasses.replace(GATED, hooks=[hook]))
    pipeline.script(Reply(tool_calls=[called]), Reply(content="Refused."))
    body = pipeline.finish(pipeline.start("go", agent="gated"))

    assert ran not in CALLS.counts
    assert tool_messages(pipeline, 1)[0].endswith("needs a person's approval, and none was recorded.")
    assert body["executions"][0]["error_type"] == "NotApproved"


def test_a_hook_cannot_rename_an_approved_call_into_another_tool(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    @tool
    def preview_payment(to: str, amount: float) -> str:
        """Show a payment without making it.

        Args:
            to: The recipient.
            amount: How much.
        """
        CALLS.add("preview_payment")
        return "previewed"

    # The same arguments, so the same hash: the tool's name must match too.
    rename = Rewrite("wire_money", ("preview_payment", {"to": "ana", "amount": 5}))
    agent = dataclasses.replace(GATED, tools=[*GATED.tools, preview_payment], hooks=[rename])
    monkeypatch.setitem(AGENTS, GATED.name, agent)
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=5)]), Reply(content="Refused."))
    run_id = pipeline.start("pay ana", agent="gated")
    approval = pending(pipeline)
    pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    pipeline.finish(run_id)

    assert CALLS.counts == {}
    assert tool_messages(pipeline, 1)[0].endswith("it was changed after it was approved.")


@tool(name="wire_money", requires_approval=True)
def wire_money_in_cents(to: str, amount: float, memo: str = "") -> str:
    """Send money.

    Args:
        to: The recipient.
        amount: How much, in cents.
        memo: A note for the recipient.
    """
    CALLS.add("wire_money_in_cents")
    return f"sent {amount} cents to {to}"


def _redeployed(*tools: Any) -> Agent:
    """The gated agent as a deploy changes it: `wire_money` replaced by `tools`."""
    others = [t for t in GATED.tools if getattr(t, "name", None) != "wire_money"]
    return dataclasses.replace(GATED, tools=[*tools, *others])


@pytest.mark.parametrize(
    "redeployed",
    [_redeployed(wire_money_in_cents), _redeployed()],
    ids=["another-schema", "removed"],
)
def test_an_approved_call_whose_tool_changed_while_it_waited_is_not_run(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, redeployed: Agent
) -> None:
    pipeline.script(
        Reply(tool_calls=[call("wire_money", to="ana", amount=250)]), Reply(content="Asking again.")
    )
    run_id = pipeline.start("pay ana", agent="gated")
    approval = pending(pipeline)
    assert approval["tool_sha256"] == tool_hash(wire_money)
    monkeypatch.setitem(AGENTS, GATED.name, redeployed)  # a deploy while the call waits
    assert pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")[0] == 200
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    assert CALLS.counts == {}  # neither the old tool nor the new one ran
    assert tool_messages(pipeline, 1) == [
        "Error: not run: the tool 'wire_money' changed while its call waited for approval; ask again."
    ]
    assert body["executions"][0]["error_type"] == "ToolChanged"


def test_an_approved_call_whose_tool_is_unchanged_runs_after_its_agent_is_registered_again(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=250)]), Reply(content="Sent."))
    run_id = pipeline.start("pay ana", agent="gated")
    approval = pending(pipeline)
    assert approval["tool_sha256"] == tool_hash(wire_money)
    # Registered again with other instructions and the same tool definition: the call runs.
    again = dataclasses.replace(GATED, instructions="You move money, carefully.")
    monkeypatch.setitem(AGENTS, GATED.name, again)
    pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    assert CALLS.counts == {"wire_money": 1}
    assert tool_messages(pipeline, 1) == ["sent 250.0 to ana"]


def test_an_approval_stored_before_tool_hashes_were_kept_runs_as_before(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=250)]), Reply(content="Sent."))
    run_id = pipeline.start("pay ana", agent="gated")
    approval = pending(pipeline)
    # The record and the gate as an older version wrote them: without the tool's hash.
    table, dynamodb = "toolpipe-local", pipeline.runtime.dynamodb
    keys = [
        {"pk": {"S": f"APPROVAL#{approval['approval_id']}"}, "sk": {"S": "APPROVAL"}},
        {"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": f"GATE#{approval['seq']:06d}"}},
    ]
    for key in keys:
        assert dynamodb.get_item(TableName=table, Key=key)["Item"]["tool_sha256"]["S"] == tool_hash(
            wire_money
        )
        dynamodb.update_item(TableName=table, Key=key, UpdateExpression="REMOVE tool_sha256")
    assert pipeline.runtime.api("GET", f"/approvals/{approval['approval_id']}")[1]["tool_sha256"] is None
    monkeypatch.setitem(AGENTS, GATED.name, _redeployed(wire_money_in_cents))
    pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    assert CALLS.counts == {"wire_money_in_cents": 1}  # as before this check: nothing to compare
    assert tool_messages(pipeline, 1) == ["sent 250.0 cents to ana"]


def test_a_call_that_waits_costs_the_constant_in_history_events(pipeline: Pipeline) -> None:
    done = Reply(content="done")

    def events(*replies: Reply, approve: bool = False) -> int:
        pipeline.script(*replies)
        run_id = pipeline.start("measure", agent="gated")
        if approve:
            pipeline.runtime.api("POST", f"/approvals/{pending(pipeline)['approval_id']}/approve")
        pipeline.finish(run_id)
        return len(pipeline.runtime.execution_events(run_id))

    plain = events(Reply(tool_calls=[call("count_once", label="a")]), done)
    approved = events(Reply(tool_calls=[call("wire_money", to="a", amount=1)]), done, approve=True)
    mixed = events(
        Reply(tool_calls=[call("wire_money", to="a", amount=1), call("count_once", label="b")]),
        done,
        approve=True,
    )

    assert approved - plain == EVENTS_PER_APPROVAL
    # The ungated call of a gated turn passes its branch's Choice: 2 events, within the constant.
    assert mixed - approved == EVENTS_PER_CALL + 2
    assert mixed <= execution_events_bound([2], gated=True)


def test_a_waiting_call_is_announced_once_without_its_token(pipeline: Pipeline) -> None:
    from tests.e2e.test_run_events import ended, of, subscribe, validate

    read = subscribe(pipeline.runtime)
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=250)]), Reply(content="Sent."))
    run_id = pipeline.start("pay ana", agent="gated")
    approval = pending(pipeline)
    pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    pipeline.finish(run_id)

    events = read(ended)
    validate(events)
    [announced] = of(events, "ApprovalRequested")
    assert announced["approval_id"] == approval["approval_id"]
    assert (announced["run_id"], announced["tool"], announced["slot"]) == (run_id, "wire_money", 3)
    assert announced["arguments_preview"] == '{"to": "ana", "amount": 250}'
    token = pipeline.runtime.dynamodb.get_item(
        TableName="toolpipe-local",
        Key={"pk": {"S": f"APPROVAL#{approval['approval_id']}"}, "sk": {"S": "TOKEN"}},
    )["Item"]["token"]["S"]
    assert token not in json.dumps(events)


def test_an_agent_tool_can_require_approval_and_its_child_run_starts_once_approved(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    delegating = Agent(
        name="delegating",
        instructions="You delegate.",
        tools=[agent_tool("tester", name="ask_tester", requires_approval=True)],
    )
    monkeypatch.setitem(AGENTS, delegating.name, delegating)
    pipeline.script(
        Reply(tool_calls=[call("ask_tester", task="say hi")]),
        Reply(content="hi"),
        Reply(content="It said hi."),
    )
    run_id = pipeline.start("delegate", agent="delegating")
    approval = pending(pipeline)
    assert approval["tool"] == "ask_tester" and len(pipeline.model.requests) == 1  # no child run yet

    pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    body = pipeline.finish(run_id)

    assert body["run"]["status"] == "succeeded"
    assert tool_messages(pipeline, 2) == ["hi"]


def test_a_call_still_waits_for_its_approval_after_the_local_runtime_restarts(tmp_path: Path) -> None:
    """The waiting task dies with the process; the resumed execution waits again on the same
    approval (its new token replaces the dead one), and the decision reaches it."""
    with ScriptedModelServer(ScriptResponder([])) as model:
        env = {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "scripted"}
        model.responder = ScriptResponder(
            [Reply(tool_calls=[call("wire_money", to="ana", amount=5)]), Reply(content="Sent.")]
        )
        with LocalRuntime(state_dir=tmp_path, extra_env=env) as runtime:
            runtime.drain_seconds = 0.5  # shut down while the call waits: its execution is stopped
            _, started = runtime.api("POST", "/runs", {"input": "pay ana", "agent": "gated"})
            run_id = started["run_id"]
            before = pending(Pipeline(runtime, model))
        with LocalRuntime(state_dir=tmp_path, extra_env=env) as runtime:
            assert runtime.resumed == [run_id]
            again = pending(Pipeline(runtime, model))
            assert again["approval_id"] == before["approval_id"]
            assert runtime.api("POST", f"/approvals/{before['approval_id']}/approve")[0] == 200
            runtime.wait_for_execution(run_id, 30)
            _, body = runtime.api("GET", f"/runs/{run_id}")
    assert body["run"]["status"] == "succeeded"
    assert CALLS.counts["wire_money"] == 1


def test_a_cancelled_runs_waiting_call_can_no_longer_be_approved(pipeline: Pipeline) -> None:
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=5)]), Reply(content="never"))
    run_id = pipeline.start("pay ana", agent="gated")
    approval = pending(pipeline)
    assert pipeline.runtime.api("POST", f"/runs/{run_id}/cancel")[0] == 200
    pipeline.finish(run_id)

    status, body = pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    assert (status, body["message"]) == (
        409,
        f"run {run_id} already ended (cancelled): approval {approval['approval_id']} no longer waits",
    )
    assert pipeline.runtime.api("GET", f"/approvals/{approval['approval_id']}")[1]["status"] == "expired"
    assert "wire_money" not in CALLS.counts


def _sent_emails() -> list[tuple[list[str], str]]:
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ses.models import ses_backends

    # What moto's SES kept of each email sent: whom it went to, and its subject.
    return [
        (m.destinations["ToAddresses"], m.subject)
        for m in ses_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].sent_messages
    ]


def test_the_example_assistant_sends_an_approved_email_once_and_a_denied_one_never(
    pipeline: Pipeline,
) -> None:
    email = call("send_email", to="ana@example.com", subject="Report", body="The report is ready.")
    pipeline.script(Reply(tool_calls=[email]), Reply(content="Sent."))
    sent_id = pipeline.start("Email Ana", agent="assistant")
    approval = pending(pipeline)
    assert _sent_emails() == []  # waiting: nothing sent
    pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/approve")
    assert pipeline.finish(sent_id)["run"]["status"] == "succeeded"
    assert _sent_emails() == [(["ana@example.com"], "Report")]
    assert tool_messages(pipeline, 1)[0].startswith("Email sent to ana@example.com (message id ")

    pipeline.script(Reply(tool_calls=[email]), Reply(content="Not sent."))
    denied_id = pipeline.start("Email Ana again", agent="assistant")
    approval = pending(pipeline)
    pipeline.runtime.api("POST", f"/approvals/{approval['approval_id']}/deny", {"reason": "she has it"})
    pipeline.finish(denied_id)
    assert _sent_emails() == [(["ana@example.com"], "Report")]  # still the one
    assert tool_messages(pipeline, -1) == [
        "Error: A person denied the call to 'send_email'; it was not run. Their reason: she has it"
    ]


def test_a_caller_of_the_longest_identity_has_its_gated_call_approved(pipeline: Pipeline) -> None:
    # Its approval is listed under the caller too (the key with the longest prefix): an identity
    # one byte longer is refused at the start (tests/functional/test_caller_limits.py).
    from tests.functional.test_caller_limits import identity
    from toolpipe.shared.dynamo import MAX_CALLER_BYTES

    longest = identity(MAX_CALLER_BYTES)
    pipeline.script(Reply(tool_calls=[call("wire_money", to="ana", amount=250)]), Reply(content="Sent."))
    run_id = pipeline.start("pay ana", agent="gated", caller=longest)
    deadline = time.monotonic() + 20
    while not (
        listed := pipeline.runtime.api("GET", "/approvals?status=pending", caller=longest)[1]["approvals"]
    ):
        assert time.monotonic() < deadline, "no call waits for approval"
        time.sleep(0.05)
    [approval] = listed
    assert (approval["run_id"], approval["requester"]) == (run_id, longest)

    status, decided = pipeline.runtime.api(
        "POST", f"/approvals/{approval['approval_id']}/approve", caller=longest
    )
    assert (status, decided["status"]) == (200, "approved")
    body = pipeline.finish(run_id)
    assert body["run"]["status"] == "succeeded" and CALLS.counts["wire_money"] == 1
    assert (
        pipeline.runtime.api("POST", "/runs", {"input": "hi"}, caller=identity(MAX_CALLER_BYTES + 1))[0]
        == 400
    )
