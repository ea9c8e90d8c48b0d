"""Approvals, pure parts: the policy per tool, the arguments' hash, what the model reads of an
unapproved call, and the gated branch of the definition."""

import dataclasses
import os
from typing import Any

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from toolpipe.infra.cdk.definition import build_definition, loop_states
from toolpipe.shared.agents import AGENTS, Agent, agent_tool
from toolpipe.shared.deferred import Approval, ApprovalStatus, arguments_hash
from toolpipe.shared.deferred.answers import unapproved_result
from toolpipe.shared.errors import DefinitionError, ErrorKind
from toolpipe.shared.history import MemoryHistoryStore
from toolpipe.shared.history.ports import CallRead
from toolpipe.shared.messages import (
    AssistantMessage,
    RunRecord,
    RunStatus,
    ToolCall,
    ToolCallMessage,
    ToolResult,
    UserMessage,
)
from toolpipe.shared.runs import ToolCallExecutor
from toolpipe.shared.tools import ToolContext, schema_tool, tool

CTX = ToolContext(run_id="r1", agent="shop", call_id="c1", caller="ana")


def _above_100(arguments: dict[str, Any], ctx: ToolContext) -> bool:
    return float(arguments["amount"]) > 100


@tool(requires_approval=_above_100)
def refund(amount: float) -> str:
    """Refund an order.

    Args:
        amount: How much.
    """
    return "ok"


def test_a_policy_is_a_bool_or_a_function_of_the_validated_arguments() -> None:
    @tool(requires_approval=True)
    def send(to: str) -> str:
        """Send."""
        return to

    assert send.needs_approval({"to": "x"}, CTX) is True
    assert refund.needs_approval(refund.parse_arguments('{"amount": "150"}'), CTX) is True  # coerced first
    assert refund.needs_approval(refund.parse_arguments('{"amount": 99}'), CTX) is False
    plain = schema_tool({"properties": {}}, lambda args: "x", name="plain", description="Plain.")
    assert plain.needs_approval({}, CTX) is False


def test_a_policy_that_fails_or_answers_oddly_fails_closed() -> None:
    def broken(arguments: dict[str, Any], ctx: ToolContext) -> bool:
        raise KeyError("amount")

    gated = dataclasses.replace(refund, requires_approval=broken)
    assert gated.needs_approval({}, CTX) is True
    odd = dataclasses.replace(refund, requires_approval=lambda arguments, ctx: "no")  # type: ignore[arg-type,return-value]
    assert odd.needs_approval({}, CTX) is True


def test_a_policy_that_is_neither_is_refused_at_definition() -> None:
    with pytest.raises(DefinitionError, match="requires_approval is True, False or a function"):

        @tool(requires_approval="yes")  # type: ignore[call-overload]
        def send(to: str) -> str:
            """Send."""
            return to


def test_schema_tools_and_agent_tools_take_a_policy() -> None:
    lookup = schema_tool(
        {"properties": {"amount": {"type": "number"}}},
        lambda args: "x",
        name="pay",
        description="Pay.",
        requires_approval=_above_100,
    )
    assert lookup.needs_approval({"amount": 101}, CTX) and not lookup.needs_approval({"amount": 1}, CTX)
    helper = agent_tool("assistant", requires_approval=True)
    assert helper.child_agent == "assistant" and helper.needs_approval({"task": "x"}, CTX)


def test_the_hash_is_of_the_canonical_arguments() -> None:
    assert arguments_hash('{"b": 1, "a": "é"}') == arguments_hash('{"a":"é","b":1}')
    assert arguments_hash('{"a": 1}') != arguments_hash('{"a": 2}')
    assert arguments_hash("") == arguments_hash("{}")
    assert arguments_hash("{not json") != arguments_hash("{}")
    assert len(arguments_hash("{}")) == 64


def _approval(status: ApprovalStatus, reason: str | None = None) -> Approval:
    return Approval(
        approval_id="0" * 32,
        run_id="r1",
        seq=3,
        message_seq=2,
        turn=1,
        call_id="c1",
        tool="send_email",
        arguments_sha256=arguments_hash("{}"),
        arguments_preview="{}",
        requester="ana",
        status=status,
        created_at="2026-11-22T10:00:00.000+00:00",
        expires_at="2026-11-23T10:00:00.000+00:00",
        reason=reason,
    )


def test_what_the_model_reads_of_a_call_that_was_not_approved() -> None:
    assert unapproved_result(_approval(ApprovalStatus.DENIED, "not today")) == (
        "Error: A person denied the call to 'send_email'; it was not run. Their reason: not today",
        ErrorKind.APPROVAL_DENIED,
    )
    text, kind = unapproved_result(_approval(ApprovalStatus.EXPIRED)) or ("", None)
    assert kind is ErrorKind.APPROVAL_EXPIRED and "none came in time" in text
    assert unapproved_result(_approval(ApprovalStatus.APPROVED)) is None


def test_only_a_gated_turn_takes_the_map_whose_branches_wait() -> None:
    states = loop_states(build_definition())
    gated_rule, plain_rule, wait_rule = states["Route"]["Choices"]
    assert gated_rule["Next"] == "RunGatedTools" and plain_rule["Next"] == "RunTools"
    assert wait_rule["Next"] == "WaitForModel"  # the model's rate limit, never a Map
    # The plain Map is the one every ungated turn takes: it starts at Dispatch, as before.
    assert states["RunTools"]["ItemProcessor"]["StartAt"] == "Dispatch"
    assert set(states["RunTools"]["ItemProcessor"]["States"]) == {"Dispatch", "CallFailed"}
    branch = states["RunGatedTools"]["ItemProcessor"]
    assert branch["StartAt"] == "NeedsApproval"
    wait = branch["States"]["WaitForApproval"]
    assert wait["Resource"] == "arn:aws:states:::lambda:invoke.waitForTaskToken"
    assert wait["Parameters"]["Payload"]["task_token.$"] == "$$.Task.Token"
    assert wait["TimeoutSecondsPath"] == "$.call.approval_timeout_seconds"
    # Nothing beats while a person decides; AWS requires a heartbeat shorter than the timeout.
    assert "HeartbeatSeconds" not in wait and "HeartbeatSecondsPath" not in wait
    assert wait["Next"] == "GatedDispatch" and wait["Catch"][0]["Next"] == "NotApproved"
    # The gated Map dispatches as the plain one does, under names of its own (AWS refuses a
    # definition that repeats a state name anywhere in it).
    assert (
        branch["States"]["GatedDispatch"]["Resource"]
        == states["RunTools"]["ItemProcessor"]["States"]["Dispatch"]["Resource"]
    )
    assert branch["States"]["GatedDispatch"]["Catch"][0]["Next"] == "GatedCallFailed"
    assert branch["States"]["NotApproved"]["End"] is True


# --- the worker runs exactly what was approved --------------------------------------------

SENT: list[str] = []


@tool(requires_approval=True)
def send(to: str, amount: int) -> str:
    """Send money.

    Args:
        to: Who.
        amount: How much.
    """
    SENT.append(to)
    return f"sent {amount} to {to}"


APPROVER = Agent(name="approver", instructions="You send money.", tools=[send])


class _Reporter:
    def succeed(self, token: str, output: dict[str, Any]) -> bool:
        return True

    def heartbeat(self, token: str) -> bool:
        return True


class _Starter:
    def start(
        self, run_id: str, execution: int = 1, deadline: str | None = None, waits: str = "count"
    ) -> None:
        raise AssertionError("no child run here")


class _GatedStore(MemoryHistoryStore):
    """The in-memory store, with the call's gate as the DynamoDB store reads it."""

    gate: dict[str, Any] | None = None

    def load_call(self, run_id: str, reply_seq: int, seq: int) -> CallRead:
        return dataclasses.replace(super().load_call(run_id, reply_seq, seq), gate=self.gate)


def _deliver(gate: dict[str, Any] | None, arguments: str = '{"to": "ana", "amount": 5}') -> ToolResult:
    store = _GatedStore()
    store.gate = gate
    store.create_run(
        RunRecord(run_id="r1", agent="approver", status=RunStatus.RUNNING),
        UserMessage(seq=1, turn=0, content="pay"),
    )
    store.append(
        "r1", AssistantMessage(seq=2, turn=1, tool_calls=[ToolCall(id="c", name="send", arguments=arguments)])
    )
    executor = ToolCallExecutor(store, _Reporter(), _Starter(), heartbeat_every=60, sleep=lambda s: None)
    executor.execute(ToolCallMessage(run_id="r1", seq=3, message_seq=2, task_token="t"), lease_seconds=60)
    result = store.get_item("r1", 3)
    assert isinstance(result, ToolResult)
    return result


@pytest.fixture
def approver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(AGENTS, APPROVER.name, APPROVER)
    SENT.clear()


def _gate(status: str, arguments: str = '{"amount": 5, "to": "ana"}') -> dict[str, Any]:
    return {"approval_id": "0" * 32, "arguments_sha256": arguments_hash(arguments), "status": status}


@pytest.mark.usefixtures("approver")
@pytest.mark.parametrize(
    ("gate", "why"),
    [
        (None, "none was recorded"),
        (_gate("pending"), "it is pending"),
        (_gate("denied"), "it is denied"),
        (_gate("approved", '{"to": "ana", "amount": 6}'), "its arguments are not the ones approved"),
    ],
    ids=["no-approval", "pending", "denied", "other-arguments"],
)
def test_the_worker_refuses_a_gated_call_without_its_approval(gate: dict[str, Any] | None, why: str) -> None:
    result = _deliver(gate)
    assert result.error_type is ErrorKind.NOT_APPROVED
    assert result.content == f"Error: not run: the call to 'send' needs a person's approval, and {why}."
    assert SENT == []


@pytest.mark.usefixtures("approver")
def test_the_worker_runs_the_approved_arguments_however_they_are_spelled() -> None:
    result = _deliver(_gate("approved"), '{ "to":"ana",  "amount":5 }')
    assert (result.status, result.content, SENT) == ("ok", "sent 5 to ana", ["ana"])


@pytest.mark.parametrize(
    ("error", "certain"),
    [
        (ClientError({"Error": {"Code": "ThrottlingException"}}, "SendTaskSuccess"), True),
        (ClientError({"Error": {"Code": "TooManyRequestsException"}}, "SendTaskSuccess"), True),
        (
            ClientError(
                {"Error": {"Code": "ValidationException"}, "ResponseMetadata": {"HTTPStatusCode": 400}},
                "SendTaskSuccess",
            ),
            True,
        ),
        (
            ClientError(
                {"Error": {"Code": "InternalServerError"}, "ResponseMetadata": {"HTTPStatusCode": 500}},
                "SendTaskSuccess",
            ),
            False,
        ),
        (EndpointConnectionError(endpoint_url="https://states"), True),
        (ConnectTimeoutError(endpoint_url="https://states"), True),
        (ReadTimeoutError(endpoint_url="https://states"), False),
        (ConnectionClosedError(endpoint_url="https://states"), False),
        (RuntimeError("anything else"), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_only_a_refusal_or_a_connection_never_opened_is_certainly_not_sent(
    error: BaseException, certain: bool
) -> None:
    """What decides between taking a decision back and keeping it (docs/concepts/deferred-calls.md "The approval link")."""
    from toolpipe.shared.runs.ports import certainly_not_sent

    assert certainly_not_sent(error) is certain


def test_servers_that_overlap_leave_the_link_base_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests start several local servers in one process, overlapping (a restart): once all have
    # closed, the link base the orchestrator reads is what it was before any, never a dead one's.
    from toolpipe.infra.local.server import LINK_BASE_ENV, _LinkBases

    monkeypatch.delenv(LINK_BASE_ENV, raising=False)
    bases = _LinkBases()
    bases.enter("http://a/v1")
    bases.enter("http://b/v1")
    assert os.environ[LINK_BASE_ENV] == "http://b/v1"
    bases.leave("http://a/v1")
    assert os.environ[LINK_BASE_ENV] == "http://b/v1"
    bases.leave("http://b/v1")
    assert LINK_BASE_ENV not in os.environ
    # A base set by hand (a tunnel) wins over the servers' own, and stays.
    monkeypatch.setenv(LINK_BASE_ENV, "https://tunnel.example/v1")
    bases.enter("http://c/v1")
    assert os.environ[LINK_BASE_ENV] == "https://tunnel.example/v1"
    bases.leave("http://c/v1")
    assert os.environ[LINK_BASE_ENV] == "https://tunnel.example/v1"
