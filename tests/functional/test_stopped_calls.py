"""A function's thread that outlives its runtime (a tool that hung past the shutdown) calls
nothing: not AWS itself once no runtime is up (the mock gone), and not a later runtime's
emulator (infra/local/stopped_calls.py, infra/local/iam.py)."""

import io
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.httpsession import URLLib3Session

from tests.conftest import GATE, GATE_REACHED, Reply, _pipeline, call, wait_for_gate
from toolpipe.infra.local.caller import running_as
from toolpipe.infra.local.runtime import LocalRuntime
from toolpipe.shared.agents import AGENTS, Agent

TABLE = "toolpipe-local"
GATEKEEPER = Agent(name="gatekeeper", instructions="You wait.", tools=[wait_for_gate], max_iterations=2)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The URLs of every request that would have left the process (none is sent)."""
    urls: list[str] = []

    def send(self: URLLib3Session, request: Any) -> Any:
        urls.append(request.url)
        raise ConnectionRefusedError(f"the test lets no request out: {request.url}")

    monkeypatch.setattr(URLLib3Session, "send", send)
    yield urls


def _refused(error: pytest.ExceptionInfo[ClientError], function: str) -> None:
    assert error.value.response["Error"]["Code"] == "ServiceUnavailable"
    assert error.value.response["Error"]["Message"] == f"the local runtime of {function} has stopped"


def test_a_stopped_functions_calls_are_refused_with_or_without_another_runtime_and_a_live_ones_go_on(
    sent: list[str],
) -> None:
    key = {"pk": {"S": "RUN#late"}, "sk": {"S": "META"}}
    with LocalRuntime(workers=0) as runtime:
        worker = runtime.functions["tool_worker"]
        with running_as(worker):
            made = boto3.client("dynamodb")
            made.get_item(TableName=TABLE, Key=key)  # while it runs: allowed, answered by moto
    with running_as(worker), pytest.raises(ClientError) as no_runtime:
        made.put_item(TableName=TABLE, Item=key)
    _refused(no_runtime, "tool_worker")
    with LocalRuntime(workers=0) as later:
        with running_as(worker), pytest.raises(ClientError) as another_runtime:
            made.put_item(TableName=TABLE, Item=key)
        _refused(another_runtime, "tool_worker")
        assert "Item" not in later.dynamodb.get_item(TableName=TABLE, Key=key)
        # The caller is checked, not the client's maker: a client kept from an earlier runtime
        # (a tool module's own, say) serves the later runtime's functions.
        with running_as(later.functions["tool_worker"]):
            made.put_item(TableName=TABLE, Item=key)
        assert "Item" in later.dynamodb.get_item(TableName=TABLE, Key=key)
    assert sent == []


def test_no_client_and_no_thread_of_a_stopped_function_reaches_out(sent: list[str]) -> None:
    """The review's paths: a client made before the runtime, or by the thread after the stop
    (signed then with the process's own credentials), a resource, an S3 transfer's threads and a
    thread of the function's own all went out once no runtime was up."""
    before = boto3.client("dynamodb", region_name="us-east-1")
    key = {"pk": {"S": "RUN#late"}, "sk": {"S": "META"}}
    with LocalRuntime(workers=0) as runtime:
        worker = runtime.functions["tool_worker"]
        with running_as(worker):
            during = boto3.client("s3")
    refused: list[str] = []

    def put_from_a_thread() -> None:
        try:
            during.put_object(Bucket="b", Key="k", Body=b"x")
        except ClientError as e:
            refused.append(e.response["Error"]["Message"])

    attempts = {
        "a client made before": lambda: before.put_item(TableName=TABLE, Item=key),
        "a client made after": lambda: boto3.client("dynamodb", region_name="us-east-1").put_item(
            TableName=TABLE, Item=key
        ),
        "a resource made after": lambda: (
            boto3.resource("dynamodb", region_name="us-east-1")
            .Table(TABLE)
            .put_item(Item={"pk": "x", "sk": "y"})
        ),
        "an S3 transfer": lambda: during.upload_fileobj(io.BytesIO(b"x" * 10), "b", "k"),
    }
    for what, attempt in attempts.items():
        with running_as(worker), pytest.raises(ClientError) as error:
            attempt()
        _refused(error, "tool_worker")
        assert sent == [], what
    with running_as(worker):
        thread = threading.Thread(target=put_from_a_thread)
        thread.start()
        thread.join(timeout=20)
    assert refused == ["the local runtime of tool_worker has stopped"]
    assert sent == []
    # Outside a stopped function's threads, nothing is refused: the call is sent.
    with pytest.raises(ConnectionRefusedError):
        before.put_item(TableName=TABLE, Item=key)
    assert sent == ["https://dynamodb.us-east-1.amazonaws.com/"]


def test_a_tool_that_ends_after_its_runtime_stopped_sends_nothing_anywhere(
    sent: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in the suite: a hung call's cost count, once it ended, went to
    dynamodb.us-east-1.amazonaws.com after its test had ended."""
    monkeypatch.setitem(AGENTS, GATEKEEPER.name, GATEKEEPER)
    GATE.clear()
    GATE_REACHED.clear()
    before = set(threading.enumerate())
    try:
        for pipeline in _pipeline():
            pipeline.runtime.drain_seconds = 0.2
            pipeline.script(Reply(tool_calls=[call("wait_for_gate", label="late")]), Reply(content="Done."))
            pipeline.start("Wait at the gate", agent=GATEKEEPER.name)
            assert GATE_REACHED.wait(20), "the call never reached the gate"
        # The runtime has stopped, with the call still waiting on its worker's thread.
        left = [t for t in threading.enumerate() if t not in before and t.name.startswith("tool-worker-")]
        assert left, "no worker's thread outlived the runtime: nothing to test"
    finally:
        GATE.set()
    for thread in left:  # the call ends; its worker stores the result, reports it, counts it
        thread.join(timeout=20)
    assert not [t.name for t in left if t.is_alive()]
    assert sent == []
