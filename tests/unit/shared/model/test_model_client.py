"""The model client against a real HTTP server speaking the Chat Completions protocol."""

import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI

from toolpipe.infra.local.scripted_model import (
    HttpError,
    RawResponse,
    Reply,
    ScriptedModelServer,
    ScriptResponder,
)
from toolpipe.shared.messages import ToolCall
from toolpipe.shared.model import openai_client, to_openai_messages
from toolpipe.shared.model.errors import ModelCallError, ModelRateLimitedError, ModelRejectedError
from toolpipe.shared.model.openai_client import (
    MAX_NAME_CHARS,
    RESERVE_SECONDS,
    OpenAIModelClient,
    build_openai_client,
)

RATE_LIMITED = HttpError(
    429, {"error": {"message": "slow down", "type": "rate_limit"}}, {"retry-after": "0.25"}
)
MakeClient = Callable[..., OpenAIModelClient]


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(ScriptResponder([])) as s:
        yield s


@pytest.fixture
def make_client(server: ScriptedModelServer) -> Iterator[MakeClient]:
    made: list[OpenAIModelClient] = []

    def make(sleeps: list[float] | None = None, **options: Any) -> OpenAIModelClient:
        waits = sleeps if sleeps is not None else []
        options.setdefault("max_retries", 3)
        client = OpenAIModelClient(build_openai_client(server.base_url, "k"), sleep=waits.append, **options)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def _deadline(seconds: float = 60) -> float:
    return time.monotonic() + seconds


def _ask(client: OpenAIModelClient, deadline: float | None = None) -> Any:
    return client.complete(model="m", messages=[], tools=[], deadline=deadline or _deadline())


def _completion(message: dict[str, Any], **extra: Any) -> RawResponse:
    return RawResponse(body=json.dumps({"choices": [{"index": 0, "message": message}], **extra}).encode())


def test_tool_calls_and_usage_are_read(server: ScriptedModelServer, make_client: MakeClient) -> None:
    server.responder = ScriptResponder(
        [Reply(tool_calls=[("sum", {"a": 1, "b": 2}), ("sum", {"a": 3, "b": 4})])]
    )
    reply = make_client().complete(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"type": "function"}],
        deadline=_deadline(),
    )
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("sum", '{"a": 1, "b": 2}'),
        ("sum", '{"a": 3, "b": 4}'),
    ]
    assert reply.prompt_tokens > 0 and reply.completion_tokens > 0
    assert server.requests[0]["parallel_tool_calls"] is True


def test_retry_after_is_honoured(server: ScriptedModelServer, make_client: MakeClient) -> None:
    server.responder = ScriptResponder([RATE_LIMITED, Reply(content="ok")])
    sleeps: list[float] = []
    reply = make_client(sleeps).complete(model="m", messages=[], tools=[], deadline=_deadline())
    assert reply.content == "ok"
    assert sleeps == [0.25]
    assert len(server.requests) == 2


def test_a_wait_past_the_deadline_is_not_started(
    server: ScriptedModelServer, make_client: MakeClient
) -> None:
    long_wait = HttpError(429, {"error": {"message": "later", "type": "rate_limit"}}, {"retry-after": "120"})
    server.responder = ScriptResponder([long_wait, Reply(content="never asked")])
    sleeps: list[float] = []
    with pytest.raises(ModelCallError, match=r"asked to wait 120\.0 s, past the invocation.s deadline"):
        make_client(sleeps).complete(model="m", messages=[], tools=[], deadline=_deadline(60))
    assert sleeps == [] and len(server.requests) == 1


def test_a_governed_client_leaves_every_wait_to_the_governor(
    server: ScriptedModelServer, make_client: MakeClient
) -> None:
    """With a rate governor, a 429 (with or without Retry-After) and any answer that names a wait
    are raised at once, never slept through; a 5xx that names none is still retried here."""
    unavailable = HttpError(503, {"error": {"message": "busy", "type": "server"}}, {"retry-after-ms": "1500"})
    no_wait = HttpError(429, {"error": {"message": "slow down", "type": "rate_limit"}})
    server.responder = ScriptResponder([RATE_LIMITED, unavailable, no_wait])
    sleeps: list[float] = []
    client = make_client(sleeps, governed=True)
    for wanted in (0.25, 1.5, None):
        with pytest.raises(ModelRateLimitedError) as raised:
            client.complete(model="m", messages=[], tools=[], deadline=_deadline())
        assert raised.value.retry_after == wanted
    assert "429 slow down" in str(raised.value)
    assert sleeps == [] and len(server.requests) == 3
    server.responder = ScriptResponder([HttpError(500, {"error": {"message": "oops"}}), Reply(content="ok")])
    assert client.complete(model="m", messages=[], tools=[], deadline=_deadline()).content == "ok"
    assert len(sleeps) == 1


def test_client_errors_are_not_retried(server: ScriptedModelServer, make_client: MakeClient) -> None:
    server.responder = ScriptResponder(
        [HttpError(400, {"error": {"message": "bad tools", "type": "invalid"}})]
    )
    with pytest.raises(ModelRejectedError, match="refused the request: 400"):
        make_client().complete(model="m", messages=[], tools=[], deadline=_deadline())
    assert len(server.requests) == 1


def test_server_errors_are_retried_then_given_up(
    server: ScriptedModelServer, make_client: MakeClient
) -> None:
    server_error = HttpError(503, {"error": {"message": "down", "type": "server"}})
    server.responder = ScriptResponder([server_error] * 4)
    sleeps: list[float] = []
    with pytest.raises(ModelCallError, match="failed after 4 attempts"):
        make_client(sleeps).complete(model="m", messages=[], tools=[], deadline=_deadline())
    assert len(sleeps) == 3 and all(0 < s <= 8 * 1.25 for s in sleeps)


def test_no_call_is_started_without_time_for_it(server: ScriptedModelServer, make_client: MakeClient) -> None:
    with pytest.raises(ModelCallError, match="no time left"):
        make_client().complete(model="m", messages=[], tools=[], deadline=_deadline(RESERVE_SECONDS + 1))
    assert server.requests == []


def test_history_renders_as_chat_messages() -> None:
    from toolpipe.shared.messages import AssistantMessage, ToolCall, ToolResult, UserMessage

    history = [
        UserMessage(seq=1, turn=0, content="q"),
        AssistantMessage(seq=2, turn=1, tool_calls=[ToolCall(id="c1", name="sum", arguments="{}")]),
        ToolResult(seq=3, turn=1, call_id="c1", tool="sum", content="3", status="ok"),
    ]
    assert to_openai_messages("sys", history) == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "sum", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
    ]


# --- a 200 with odd parts: normalised, never fatal --------------------------------------------

_CALL = {"id": "c1", "type": "function", "function": {"name": "sum", "arguments": '{"a": 1}'}}


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        pytest.param(
            {**_CALL, "function": {"name": None, "arguments": "{}"}}, ("c1", "", "{}"), id="null-name"
        ),
        pytest.param(
            {**_CALL, "function": {"name": 7, "arguments": "{}"}}, ("c1", "7", "{}"), id="number-name"
        ),
        pytest.param(
            {**_CALL, "function": {"name": "n" * 5000, "arguments": "{}"}},
            ("c1", "n" * MAX_NAME_CHARS, "{}"),
            id="long-name",
        ),
        pytest.param(
            {**_CALL, "function": {"name": "sum", "arguments": {"a": 1}}},
            ("c1", "sum", '{"a": 1}'),
            id="args-object",
        ),
        pytest.param(
            {**_CALL, "function": {"name": "sum", "arguments": [1]}}, ("c1", "sum", "[1]"), id="args-list"
        ),
        pytest.param(
            {**_CALL, "function": {"name": "sum", "arguments": None}}, ("c1", "sum", "{}"), id="args-null"
        ),
        pytest.param({**_CALL, "function": {"name": "sum"}}, ("c1", "sum", "{}"), id="args-missing"),
        pytest.param({**_CALL, "id": None}, ("", "sum", '{"a": 1}'), id="id-null"),
        pytest.param(
            {"type": "function", "function": _CALL["function"]}, ("", "sum", '{"a": 1}'), id="id-missing"
        ),
        pytest.param({**_CALL, "id": 42}, ("42", "sum", '{"a": 1}'), id="id-number"),
        pytest.param({**_CALL, "type": "custom"}, ("c1", "sum", '{"a": 1}'), id="type-custom"),
        pytest.param({**_CALL, "type": None}, ("c1", "sum", '{"a": 1}'), id="type-null"),
        pytest.param({"id": "c1", "type": "function"}, ("c1", "", "{}"), id="function-missing"),
        pytest.param({"id": "c1", "function": "sum"}, ("c1", "", "{}"), id="function-a-string"),
    ],
)
def test_an_odd_tool_call_is_normalised(
    server: ScriptedModelServer,
    make_client: MakeClient,
    entry: dict[str, Any],
    expected: tuple[str, str, str],
) -> None:
    server.responder = ScriptResponder([_completion({"role": "assistant", "tool_calls": [entry]})])
    reply = _ask(make_client())
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [expected]
    assert len(server.requests) == 1


def test_entries_that_are_not_calls_are_dropped(server: ScriptedModelServer, make_client: MakeClient) -> None:
    server.responder = ScriptResponder([_completion({"tool_calls": [None, "sum", 3, _CALL]})])
    assert _ask(make_client()).tool_calls == [ToolCall(id="c1", name="sum", arguments='{"a": 1}')]


@pytest.mark.parametrize(
    ("message", "content"),
    [
        pytest.param(
            {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, "ab", id="parts"
        ),
        pytest.param({"content": ["a", {"type": "image_url", "image_url": {}}, "b"]}, "ab", id="mixed-parts"),
        pytest.param({"content": [{"type": "image_url"}]}, None, id="no-text-parts"),
        pytest.param({"content": {"type": "text", "text": "a"}}, "a", id="one-part"),
        pytest.param({"content": 12}, "12", id="number"),
        pytest.param(
            {"content": None, "refusal": "I can't help with that."}, "I can't help with that.", id="refusal"
        ),
        pytest.param({"tool_calls": None}, None, id="no-content"),
    ],
)
def test_content_of_any_shape_becomes_text(
    server: ScriptedModelServer, make_client: MakeClient, message: dict[str, Any], content: str | None
) -> None:
    server.responder = ScriptResponder([_completion(message)])
    reply = _ask(make_client())
    assert reply.content == content and reply.tool_calls == []


@pytest.mark.parametrize(
    "usage",
    [
        pytest.param(b"null", id="null"),
        pytest.param(b"[]", id="list"),
        pytest.param(b'{"prompt_tokens": "12", "completion_tokens": null}', id="strings-and-null"),
        pytest.param(b'{"prompt_tokens": -3, "completion_tokens": true}', id="negative-and-bool"),
        pytest.param(b'{"prompt_tokens": NaN, "completion_tokens": Infinity}', id="nan-and-infinity"),
        pytest.param(b'{"prompt_tokens": 1e400, "completion_tokens": 10000000000000000000000}', id="too-big"),
        pytest.param(b'{"prompt_tokens": ' + b"9" * 5000 + b', "completion_tokens": 1}', id="5000-digits"),
    ],
)
def test_garbage_usage_counts_as_zero(
    server: ScriptedModelServer, make_client: MakeClient, usage: bytes
) -> None:
    body = b'{"choices": [{"message": {"content": "ok"}}], "usage": ' + usage + b"}"
    server.responder = ScriptResponder([RawResponse(body=body)])
    reply = _ask(make_client())
    assert reply.content == "ok"
    assert (reply.prompt_tokens, reply.completion_tokens) in {(0, 0), (0, 1)}
    assert len(server.requests) == 1


def test_usable_usage_is_kept(server: ScriptedModelServer, make_client: MakeClient) -> None:
    server.responder = ScriptResponder(
        [_completion({"content": "ok"}, usage={"prompt_tokens": 12, "completion_tokens": 3.0})]
    )
    reply = _ask(make_client())
    assert (reply.prompt_tokens, reply.completion_tokens) == (12, 3)


def test_a_huge_number_in_arguments_does_not_cost_the_reply(
    server: ScriptedModelServer, make_client: MakeClient
) -> None:
    big = b"9" * 5000
    body = b'{"choices": [{"message": {"tool_calls": [{"id": "c1", "function": {"name": "sum", "arguments": {"a": '
    server.responder = ScriptResponder([RawResponse(body=body + big + b"}}}]}}]}")])
    (call,) = _ask(make_client()).tool_calls
    assert (call.id, call.name) == ("c1", "sum")
    assert json.loads(call.arguments) == {"a": float("inf")}


# --- a 200 with nothing usable: retried like a 5xx --------------------------------------------

_NOT_A_COMPLETION = [
    pytest.param(
        RawResponse(body=b"<html><body>502 Bad Gateway</body></html>", headers={"content-type": "text/html"}),
        id="html",
    ),
    pytest.param(RawResponse(body=b'{"choices": [{"message": {"content": "hi"'), id="truncated-json"),
    pytest.param(RawResponse(body=b"\xff\xfe garbage \x00"), id="bad-utf8"),
    pytest.param(RawResponse(body=b""), id="empty"),
    pytest.param(RawResponse(body=b"[" * 100_000 + b"]" * 100_000), id="nested-past-the-stack"),
    pytest.param(RawResponse(body=b"null"), id="json-null"),
    pytest.param(RawResponse(body=b"[1, 2]"), id="json-list"),
    pytest.param(RawResponse(body=b"{}"), id="empty-object"),
    pytest.param(RawResponse(body=b'{"choices": null}'), id="choices-null"),
    pytest.param(RawResponse(body=b'{"choices": []}'), id="choices-empty"),
    pytest.param(RawResponse(body=b'{"choices": {"message": {}}}'), id="choices-object"),
    pytest.param(RawResponse(body=b'{"choices": [{}]}'), id="no-message"),
    pytest.param(RawResponse(body=b'{"choices": [null]}'), id="choice-null"),
    pytest.param(RawResponse(body=b'{"choices": [{"message": "hi"}]}'), id="message-a-string"),
    pytest.param(RawResponse(body=b'{"error": {"message": "overloaded"}}'), id="error-object"),
]


@pytest.mark.parametrize("answer", _NOT_A_COMPLETION)
def test_a_body_with_nothing_usable_is_retried_then_given_up(
    server: ScriptedModelServer, make_client: MakeClient, answer: RawResponse
) -> None:
    server.responder = ScriptResponder([answer] * 4)
    sleeps: list[float] = []
    with pytest.raises(
        ModelCallError, match="model endpoint failed after 4 attempts: model endpoint answered 200"
    ) as e:
        _ask(make_client(sleeps))
    # Exactly this class: the state machine's Retry matches the error name, not its parents.
    assert type(e.value) is ModelCallError
    assert len(server.requests) == 4 and len(sleeps) == 3
    assert "\n" not in str(e.value)


def test_a_garbled_body_then_a_good_one_succeeds(
    server: ScriptedModelServer, make_client: MakeClient
) -> None:
    server.responder = ScriptResponder([RawResponse(body=b"<html>oops</html>"), Reply(content="ok")])
    sleeps: list[float] = []
    assert _ask(make_client(sleeps)).content == "ok"
    assert len(server.requests) == 2 and len(sleeps) == 1


def test_the_reason_given_names_what_came_back_not_the_text(
    server: ScriptedModelServer, make_client: MakeClient
) -> None:
    secret = b"the user's prompt echoed back"
    server.responder = ScriptResponder(
        [RawResponse(body=b"<html>" + secret), RawResponse(body=b'{"error": {"message": "over\\ncapacity"}}')]
    )
    with pytest.raises(ModelCallError) as e:
        _ask(make_client(max_retries=1))
    assert "failed after 2 attempts: model endpoint answered 200 with an error: over capacity" in str(e.value)
    cause = e.value.__cause__
    assert cause is not None and "an HTML page" not in str(cause)  # the last failure is the one kept
    with pytest.raises(ModelCallError, match=r"an HTML page \(35 bytes\)") as first:
        server.responder = ScriptResponder([RawResponse(body=b"<html>" + secret)])
        _ask(make_client(max_retries=0))
    assert secret.decode() not in str(first.value)


# --- one wall-clock deadline per call --------------------------------------------------------

_GOOD = b'{"choices": [{"message": {"content": "too late"}}]}'
_TRICKLES = [
    pytest.param(RawResponse(body=_GOOD * 20, trickle_seconds_per_byte=0.1), id="body-trickled"),
    pytest.param(
        RawResponse(body=_GOOD, trickle_seconds_per_byte=0.1, trickle_headers=True), id="headers-trickled"
    ),
    pytest.param(
        RawResponse(body=_GOOD, trickle_seconds_per_byte=30, trickle_headers=True), id="nothing-sent"
    ),
]


@pytest.mark.parametrize("answer", _TRICKLES)
def test_a_slow_server_is_cut_at_the_deadline(
    server: ScriptedModelServer, make_client: MakeClient, answer: RawResponse
) -> None:
    budget = 2.5
    server.responder = ScriptResponder([answer] * 4)
    started = time.monotonic()
    with pytest.raises(ModelCallError, match=r"no complete answer within 2\.\d s\) with no time left") as e:
        _ask(make_client(), deadline=started + RESERVE_SECONDS + budget)
    assert time.monotonic() - started < budget + 1.5
    assert type(e.value) is ModelCallError
    assert len(server.requests) == 1


def test_a_cut_attempt_closes_its_connection(server: ScriptedModelServer, make_client: MakeClient) -> None:
    server.responder = ScriptResponder([RawResponse(body=_GOOD * 100, trickle_seconds_per_byte=0.05)])
    with pytest.raises(ModelCallError):
        _ask(make_client(timeout_seconds=1, max_retries=0))
    # The server only learns of a hang-up at its next writes, a few trickle steps later.
    assert server.hung_up.wait(timeout=5)


def test_a_timed_out_attempt_is_retried_while_time_remains(
    server: ScriptedModelServer, make_client: MakeClient
) -> None:
    server.responder = ScriptResponder(
        [RawResponse(body=_GOOD, trickle_seconds_per_byte=0.2), Reply(content="ok")]
    )
    sleeps: list[float] = []
    started = time.monotonic()
    assert _ask(make_client(sleeps, timeout_seconds=1)).content == "ok"
    assert 1 <= time.monotonic() - started < 2.5
    assert len(server.requests) == 2 and len(sleeps) == 1


# --- connections and threads ----------------------------------------------------------------


def _still_alive(threads: set[threading.Thread], seconds: float = 5) -> list[threading.Thread]:
    """Those of `threads` that have not ended within `seconds` each."""
    for thread in threads:
        thread.join(timeout=seconds)
    return [thread for thread in threads if thread.is_alive()]


def test_calls_reuse_one_connection_and_one_thread(server: ScriptedModelServer) -> None:
    server.responder = ScriptResponder([Reply(content="ok")] * 5)
    # By identity, not by count: threads of earlier tests may end meanwhile (seen under load).
    before = set(threading.enumerate())
    client = OpenAIModelClient(build_openai_client(server.base_url, "k"))
    _ask(client)
    started = set(threading.enumerate()) - before  # the client's loop, the server's handler
    for _ in range(4):
        _ask(client)
    assert set(threading.enumerate()) - before == started  # no thread more per call
    assert len(set(server.client_ports)) == 1
    client.close()
    client.close()  # twice is harmless
    assert _still_alive(started) == []  # the connection closed, so the server's handler ends too


def test_a_client_dropped_without_close_stops_its_thread(server: ScriptedModelServer) -> None:
    server.responder = ScriptResponder([Reply(content="ok")])
    # By identity, not a count: another test's daemon thread (a tool that overran) may end meanwhile.
    threads_before = set(threading.enumerate())
    client = OpenAIModelClient(build_openai_client(server.base_url, "k"))
    _ask(client)
    del client
    # The client's thread, and the server's handler once the dropped client's connection has
    # closed (on a loaded machine it may still be closing: seen in a run beside two busy loops).
    assert _still_alive(set(threading.enumerate()) - threads_before) == []


def test_clients_load_the_certificates_once_a_process_and_still_check_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Loading the certificates is nearly all of a client's build (~16 ms): a process loads them
    once however many clients it builds (the local runtime builds one for each runtime), and each
    client still checks the server's certificate and name with them."""
    loads: list[None] = []
    load = openai_client.httpx2.create_ssl_context
    openai_client.tls_context.cache_clear()
    monkeypatch.setattr(openai_client.httpx2, "create_ssl_context", lambda: loads.append(None) or load())
    clients = [build_openai_client("https://models.example/v1", "k") for _ in range(3)]
    assert len(loads) == 1
    context = openai_client.tls_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    # What each client's connections are made with (httpx2's transport, its connection pool).
    assert all(c._client._transport._pool._ssl_context is context for c in clients)  # type: ignore[attr-defined]
    # And otherwise the client `openai` builds by default: its timeouts, pool, redirects, proxies.
    ours, default = clients[0]._client, AsyncOpenAI(base_url="https://models.example/v1", api_key="k")._client
    for setting in ("timeout", "follow_redirects", "max_redirects", "trust_env"):
        assert getattr(ours, setting) == getattr(default, setting), setting
    pools = ours._transport._pool, default._transport._pool  # type: ignore[attr-defined]
    assert [(p._max_connections, p._max_keepalive_connections, p._keepalive_expiry) for p in pools] == [
        (pools[1]._max_connections, pools[1]._max_keepalive_connections, pools[1]._keepalive_expiry)
    ] * 2


# --- what the user reads -----------------------------------------------------------------------


def test_a_refusal_with_an_html_page_reads_as_one_short_line(
    server: ScriptedModelServer, make_client: MakeClient
) -> None:
    page = "<html>\n<head><title>403 Forbidden</title></head>\n<body>" + "x" * 5000 + "</body>\n</html>"
    server.responder = ScriptResponder(
        [RawResponse(status=403, body=page.encode(), headers={"content-type": "text/html"})]
    )
    with pytest.raises(ModelRejectedError, match="refused the request: 403") as e:
        _ask(make_client())
    assert "\n" not in str(e.value) and len(str(e.value)) < 300


@pytest.mark.parametrize("retry_after", ["soon", "nan", "inf", "-5", "Wed, 32 Foo 2026 99:00:00 GMT"])
def test_a_nonsense_retry_after_falls_back_to_backoff(
    server: ScriptedModelServer, make_client: MakeClient, retry_after: str
) -> None:
    limited = HttpError(429, {"error": {"message": "slow down"}}, {"retry-after": retry_after})
    server.responder = ScriptResponder([limited, Reply(content="ok")])
    sleeps: list[float] = []
    assert _ask(make_client(sleeps)).content == "ok"
    (wait,) = sleeps
    assert 0 <= wait <= 0.5 * 1.25


def test_an_http_date_retry_after_is_read(server: ScriptedModelServer, make_client: MakeClient) -> None:
    limited = HttpError(
        429, {"error": {"message": "slow down"}}, {"retry-after": "Thu, 01 Jan 1970 00:00:00 -0000"}
    )
    server.responder = ScriptResponder([limited, Reply(content="ok")])
    sleeps: list[float] = []
    assert _ask(make_client(sleeps)).content == "ok"
    assert sleeps == [0.0]  # a date in the past: go now


def test_a_lone_surrogate_anywhere_in_a_reply_becomes_storable_text(
    server: ScriptedModelServer, make_client: MakeClient
) -> None:
    """Servers cut text mid-emoji: a `\\ud83d` escape must not fail the reply's write."""
    body = (
        b'{"choices": [{"message": {"role": "assistant", "content": "half \\ud83d", "tool_calls": ['
        b'{"id": "c\\ud800", "type": "function", "function": {"name": "s\\udc00um", "arguments": "{\\"a\\": \\"\\ud83d\\"}"}}]}}]}'
    )
    server.responder = ScriptResponder([RawResponse(body=body)])
    reply = _ask(make_client([]))
    from toolpipe.shared.messages import HISTORY_ITEM, AssistantMessage

    item = AssistantMessage(seq=2, turn=1, content=reply.content, tool_calls=reply.tool_calls)
    assert HISTORY_ITEM.dump_json(item)  # storable
    assert reply.content == "half ?" and reply.tool_calls[0].name == "s?um"
