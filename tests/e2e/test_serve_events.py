"""The local server's event stream and its API Gateway events, on an in-process server (real HTTP)."""

import base64
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import GATE, Pipeline, call, gated_server, wait_for_gate
from toolpipe.infra.local.api_proxy import proxy_event
from toolpipe.infra.local.client import Client, ServerError
from toolpipe.infra.local.run_changes import publishable
from toolpipe.infra.local.runtime import LOCAL_CALLER, TABLE
from toolpipe.infra.local.scripted_model import Reply
from toolpipe.infra.local.server import LocalServer
from toolpipe.shared.agents import Agent
from toolpipe.shared.tools import tool


@tool
def quick(label: str) -> str:
    """Answer at once.

    Args:
        label: Any text.
    """
    return f"quick {label}"


GATED = Agent(name="gated", instructions="You test streams.", tools=[wait_for_gate, quick], max_iterations=3)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Pipeline, LocalServer]]:
    yield from gated_server(monkeypatch, GATED)


def _slot_written(pipeline: Pipeline, server: LocalServer, run_id: str, seq: int) -> None:
    """Wait, on the server's own change signal, until history slot `seq` of the run is written."""
    key = {"pk": {"S": f"RUN#{run_id}"}, "sk": {"S": f"MSG#{seq:06d}"}}
    with server.changes.watch(run_id):
        for _ in range(200):
            seen = server.changes.version(run_id)
            if "Item" in pipeline.runtime.dynamodb.get_item(TableName=TABLE, Key=key, ConsistentRead=True):
                return
            server.changes.wait(run_id, seen, 0.5)
    raise AssertionError(f"slot {seq} never written")


def test_events_come_in_slot_order_when_results_land_out_of_order(
    served: tuple[Pipeline, LocalServer],
) -> None:
    pipeline, server = served
    pipeline.script(
        Reply(tool_calls=[call("wait_for_gate", label="a"), call("quick", label="b")]),
        Reply(content="both done"),
    )
    run_id = pipeline.start("two calls", agent="gated")
    # The second call's result (slot 4) lands while the first (slot 3) is held at the gate.
    _slot_written(pipeline, server, run_id, 4)
    stream = Client(server.url).events(run_id, timeout=60)
    events = [next(stream), next(stream)]  # what exists in order: the prompt and the model's turn
    GATE.set()
    events.extend(stream)

    assert [(e, d.get("seq")) for e, d in events] == [
        ("item", 1),
        ("item", 2),
        ("item", 3),
        ("item", 4),
        ("item", 5),
        ("end", None),
    ]
    assert [d["content"] for _, d in events[2:4]] == ["passed a", "quick b"]
    assert events[-1][1]["status"] == "succeeded" and events[-1][1]["run"]["output"] == "both done"


def test_a_stream_resumes_after_the_last_event_id_and_ends_at_its_timeout(
    served: tuple[Pipeline, LocalServer],
) -> None:
    pipeline, server = served
    pipeline.script(Reply(tool_calls=[call("wait_for_gate", label="a")]), Reply(content="done"))
    run_id = pipeline.start("held", agent="gated")
    _slot_written(pipeline, server, run_id, 2)

    events = list(Client(server.url).events(run_id, after=1, timeout=0.3))

    assert [(e, d.get("seq")) for e, d in events] == [("item", 2), ("timeout", None)]
    assert events[-1][1]["status"] == "running"


def test_a_stream_is_authorized_as_the_run_is(served: tuple[Pipeline, LocalServer]) -> None:
    pipeline, server = served
    pipeline.script(Reply(content="hi"))
    run_id = pipeline.start("hello", agent="tester")

    with pytest.raises(ServerError, match=f"run {run_id} not found"):
        list(Client(server.url, caller="arn:aws:iam::000000000000:user/eve").events(run_id, timeout=5))
    with pytest.raises(ServerError, match="run nope not found"):
        list(Client(server.url).events("nope", timeout=5))


def test_a_client_that_hangs_up_mid_stream_frees_its_request(served: tuple[Pipeline, LocalServer]) -> None:
    pipeline, server = served
    pipeline.script(Reply(tool_calls=[call("wait_for_gate", label="a")]), Reply(content="done"))
    run_id = pipeline.start("held", agent="gated")
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert connection.recv(4096).startswith(b"HTTP/1.1 200 OK")
    GATE.set()  # the run writes on: the stream's next write finds the client gone

    pipeline.finish(run_id)
    assert server.wait_idle(timeout=10)
    assert Client(server.url).request("GET", f"/runs/{run_id}")[0] == 200


def test_shutdown_ends_open_streams(served: tuple[Pipeline, LocalServer]) -> None:
    pipeline, server = served
    pipeline.script(Reply(tool_calls=[call("wait_for_gate", label="a")]), Reply(content="done"))
    run_id = pipeline.start("held", agent="gated")
    stream = Client(server.url).events(run_id, timeout=60)
    assert next(stream)[0] == "item"
    closer = threading.Thread(target=server.close)
    closer.start()
    rest = list(stream)
    closer.join(timeout=20)
    assert not closer.is_alive()
    assert rest[-1] == ("error", {"message": "the local server is shutting down"})


def test_publishable_never_skips_a_slot_while_the_run_goes_on() -> None:
    items = [{"seq": s} for s in (4, 1, 2)]
    assert [i["seq"] for i in publishable(items, 0, ended=False)] == [1, 2]
    assert [i["seq"] for i in publishable(items, 2, ended=False)] == []
    assert [i["seq"] for i in publishable([*items, {"seq": 3}], 2, ended=False)] == [3, 4]
    assert [i["seq"] for i in publishable(items, 2, ended=True)] == [4]  # a slot never filled
    assert publishable(items, 4, ended=True) == []


def test_proxy_event_is_what_api_gateway_sends() -> None:
    event = proxy_event(
        "GET",
        "/runs/r%2D1/messages/7",
        "after=1&after=2&limit=",
        [("Accept", "a"), ("X-Trace", "1"), ("X-Trace", "2")],
        b"",
        LOCAL_CALLER,
    )
    assert event["resource"] == "/runs/{run_id}/messages/{seq}"
    assert event["pathParameters"] == {"run_id": "r-1", "seq": "7"}
    assert event["queryStringParameters"] == {"after": "2", "limit": ""}
    assert event["multiValueQueryStringParameters"] == {"after": ["1", "2"], "limit": [""]}
    assert event["headers"] == {"Accept": "a", "X-Trace": "2"}
    assert event["multiValueHeaders"] == {"Accept": ["a"], "X-Trace": ["1", "2"]}
    context = event["requestContext"]
    assert (context["stage"], context["resourcePath"], context["path"]) == (
        "v1",
        "/runs/{run_id}/messages/{seq}",
        "/v1/runs/r%2D1/messages/7",
    )
    assert context["identity"]["userArn"] == LOCAL_CALLER
    assert event["body"] is None and event["isBase64Encoded"] is False

    binary = proxy_event("POST", "/runs", "", [], b"\xff\x00", None)
    assert binary["body"] == base64.b64encode(b"\xff\x00").decode() and binary["isBase64Encoded"] is True
    assert "userArn" not in binary["requestContext"]["identity"]


def test_the_api_function_handles_one_event_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Powertools keeps the current event on the module's resolver: handled at once, two requests
    read each other's caller (measured here without this lock: 2 wrong answers in 1,200)."""
    from toolpipe.infra.local import api_proxy as server_module

    inside, overlapped, lock = [0], threading.Event(), threading.Lock()

    def handler(path: str, event: Any, context: Any) -> dict[str, Any]:
        with lock:
            inside[0] += 1
            if inside[0] > 1:
                overlapped.set()
        overlapped.wait(0.3)  # time for a second request to come in, were it let in
        with lock:
            inside[0] -= 1
        return {"statusCode": 200, "body": "{}"}

    monkeypatch.setattr(server_module.lambdas, "call_handler", handler)
    api = server_module.ApiFunction()
    threads = [threading.Thread(target=api.get, args=("/runs/x", LOCAL_CALLER)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not overlapped.is_set()
