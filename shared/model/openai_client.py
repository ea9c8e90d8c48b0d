"""Chat Completions with tools through the `openai` client, against any compatible endpoint.

Three things no endpoint can break:

- Retries are ours, not the client's (it is built with `max_retries=0`), because they must
  fit the Lambda's remaining time: each attempt's timeout and each wait (the server's
  `Retry-After` when it sends one) are cut to the deadline, and a retry that cannot finish
  in time is not started.
- Each attempt has one wall-clock deadline, however slowly the server sends. httpx's
  timeouts are per operation: a server that trickles a byte a second never trips a 20 s
  read timeout (measured: one call held 62 s).
- A 200 reply is parsed from its bytes by hand. Whatever can be read is normalised (a null
  tool name, arguments sent as an object, content as a list of parts, odd usage); a body
  with nothing usable in it (HTML, garbled JSON, no choices) is retried like a 5xx.
"""

import asyncio
import concurrent.futures
import email.utils
import functools
import json
import math
import random
import ssl
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from datetime import UTC
from typing import Any

import httpx2
import openai
from openai import AsyncOpenAI

from toolpipe.shared.messages import ToolCall, text_safe
from toolpipe.shared.model.api_key import ApiKeySource
from toolpipe.shared.model.errors import (
    ModelCallError,
    ModelRateLimitedError,
    ModelRejectedError,
    ModelResponseError,
)
from toolpipe.shared.model.port import ModelReply

# Time kept back for writing the reply to DynamoDB and returning to Step Functions.
RESERVE_SECONDS = 5.0
MIN_ATTEMPT_SECONDS = 2.0
_RETRYABLE_STATUS = {408, 409, 429}
# A longer name cannot be one of our tools; the model is told the tool is unknown anyway.
MAX_NAME_CHARS = 256
MAX_ID_CHARS = 256
# Above any context window: a larger count is garbage, and DynamoDB numbers stop at 38 digits.
MAX_TOKENS = 10**9
# The longest wait an answer may ask for (about 4 months), far past any run's limits, which end
# the run instead: a larger one (`Retry-After: 1e306`) would overflow the governor's arithmetic.
MAX_RETRY_AFTER_SECONDS = 1e7
_MAX_DETAIL_CHARS = 200


class OpenAIModelClient:
    """A `ModelClient` over an `AsyncOpenAI` client, driven from synchronous code.

    Why async under a sync `complete()`: the deadline must cut an attempt wherever it is
    (connecting, waiting for headers, reading a trickled body), and only a coroutine can be
    cancelled at every await; cancellation closes the socket. An httpx transport wrapper
    cannot cut a read already blocked in the socket, and a sync call in a worker thread
    cannot be cancelled at all (the thread and its socket live on). The coroutines run on
    one event loop thread owned by this client, so the connection pool, which belongs to
    that loop, is reused across calls. `close()` (or garbage collection) stops the thread.
    """

    def __init__(
        self,
        client: AsyncOpenAI,
        *,
        api_key: ApiKeySource | None = None,
        timeout_seconds: float = 60.0,
        max_retries: int = 3,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        governed: bool = False,
    ) -> None:
        self._client = client
        # A rate governor waits for the endpoint in the state machine: a 429, or any answer
        # that names a wait, is raised at once (ModelRateLimitedError), never slept through here.
        self._governed = governed
        # None: the key the client was built with, as it is.
        self._api_key = api_key
        self._timeout = timeout_seconds
        self._max_retries = max_retries
        self._sleep = sleep
        self._clock = clock
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="model-client", daemon=True)
        self._thread.start()
        # Not a method: a finalizer that referenced `self` would keep it alive for ever.
        self._finalizer = weakref.finalize(self, _shut_down, self._loop, self._thread, client)

    def close(self) -> None:
        """Cancel any call in flight, close the connections and stop the loop thread."""
        self._finalizer()

    def __enter__(self) -> "OpenAIModelClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def complete(
        self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]], deadline: float
    ) -> ModelReply:
        """One model reply, retried within the deadline.

        Raises:
            ModelKeyNotSetError: the key's secret has no value yet (before any request is sent).
            ModelRejectedError: the endpoint refused the request (4xx other than 408/409/429).
            ModelRateLimitedError: `governed`, and the endpoint answered 429 or asked to wait.
            ModelCallError: every attempt the time allowed failed. Always this exact class,
                whatever the last failure was: Step Functions retries by error name.
        """
        key = None if self._api_key is None else self._api_key.get()
        key_reread = False
        attempt = 0
        while True:
            budget = deadline - self._clock() - RESERVE_SECONDS
            if budget < MIN_ATTEMPT_SECONDS:
                raise ModelCallError(f"no time left for a model call ({budget:.1f} s after reserve)")
            failure: Exception
            try:
                return self._attempt(model, messages, tools, timeout=min(self._timeout, budget), key=key)
            except openai.APIStatusError as e:
                if e.status_code == 401 and self._api_key is not None and not key_reread:
                    # The cached key may be one replaced since (put-secret-value): read it again,
                    # once, and try again at once if it changed.
                    key_reread = True
                    fresh = self._api_key.refresh()
                    if fresh != key:
                        key = fresh
                        continue
                if not _is_retryable(e.status_code):
                    # A bad key from a secret: say which secret, so the user knows what to replace.
                    source = self._api_key.describe() if e.status_code == 401 and self._api_key else ""
                    where = f" (the key in {source})" if source else ""
                    raise ModelRejectedError(
                        f"model endpoint refused the request: {e.status_code} {_status_detail(e)}{where}"
                    ) from e
                failure, wait = e, _retry_after(e.response.headers)
                if self._governed and (e.status_code == 429 or wait is not None):
                    raise ModelRateLimitedError(
                        f"model endpoint answered {_describe(e)}", retry_after=wait
                    ) from e
            except (openai.APIConnectionError, ModelResponseError, TimeoutError) as e:
                failure, wait = e, None
            if attempt >= self._max_retries:
                raise ModelCallError(
                    f"model endpoint failed after {attempt + 1} attempts: {_describe(failure)}"
                ) from failure
            if wait is None:
                wait = min(8.0, 0.5 * 2**attempt) * (0.75 + random.random() / 2)
                too_late = f"model endpoint failed ({_describe(failure)}) with no time left to try again"
            else:
                too_late = f"model endpoint asked to wait {wait:.1f} s, past the invocation's deadline"
            if self._clock() + wait + MIN_ATTEMPT_SECONDS + RESERVE_SECONDS > deadline:
                raise ModelCallError(too_late) from failure
            self._sleep(wait)
            attempt += 1

    def _attempt(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        timeout: float,
        key: str | None = None,
    ) -> ModelReply:
        body: dict[str, Any] = {"model": model, "messages": messages}
        if tools:
            body["tools"] = tools
            body["parallel_tool_calls"] = True
        future = asyncio.run_coroutine_threadsafe(self._post(body, timeout, key), self._loop)
        try:
            # Waiting here rather than in asyncio.wait_for: the caller is back at the deadline
            # even if the cancelled request takes a while to clean up on the loop.
            answer = future.result(timeout)
        except concurrent.futures.TimeoutError as e:
            future.cancel()
            raise TimeoutError(f"no complete answer within {timeout:.1f} s") from e
        return parse_completion(answer)

    async def _post(self, body: dict[str, Any], timeout: float, key: str | None) -> bytes:
        # The client's documented way to post a body as it is (`client.post`), and the answer as
        # text: the SDK's own parse would hand back a str for an HTML body and fail on a null
        # tool name, so the body is parsed here. `chat.completions.create` would first walk every
        # message of the history through its type hints (`maybe_transform`), a cost that grew
        # with each turn; the messages here are already the wire's JSON.
        # Per request, the SDK's documented header override: the key may change between calls
        # (set after deploying, or rotated) while the client is built once per cold start.
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        text: str = await self._client.post(
            "/chat/completions", cast_to=str, body=body, options={"timeout": timeout, "headers": headers}
        )
        return text.encode()


def _shut_down(loop: asyncio.AbstractEventLoop, thread: threading.Thread, client: AsyncOpenAI) -> None:
    if loop.is_closed():
        return
    if threading.current_thread() is thread:
        # Collected on the loop's own thread: waiting for the loop here would deadlock.
        loop.call_soon(loop.stop)
        return
    closing = asyncio.run_coroutine_threadsafe(_cancel_and_close(client), loop)
    try:
        closing.result(timeout=5)
    except (TimeoutError, OSError):
        # Stopping and closing the loop below drops whatever sockets are left; there is
        # nobody to tell at shut-down (this may run from the garbage collector).
        closing.cancel()
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=5)
    if not thread.is_alive():
        loop.close()


async def _cancel_and_close(client: AsyncOpenAI) -> None:
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await client.close()
    # The SDK reads the platform once in the loop's default executor: stop its thread too.
    await asyncio.get_running_loop().shutdown_default_executor()


def _is_retryable(status: int) -> bool:
    return status in _RETRYABLE_STATUS or status >= 500


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The server's requested wait in seconds, or None when it sent none that makes sense."""
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            seconds = float(ms) / 1000
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds):
            return min(MAX_RETRY_AFTER_SECONDS, max(0.0, seconds))
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # "-0000": the RFC's way of saying UTC without a zone
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - time.time()
    return min(MAX_RETRY_AFTER_SECONDS, max(0.0, seconds)) if math.isfinite(seconds) else None


def _one_line(text: str) -> str:
    """Error text a user can read on one line: servers put whole HTML pages in error bodies."""
    line = " ".join(text.split())
    return line if len(line) <= _MAX_DETAIL_CHARS else line[: _MAX_DETAIL_CHARS - 3] + "..."


def _status_detail(e: openai.APIStatusError) -> str:
    body = e.body
    message = body.get("message") if isinstance(body, dict) else None
    return _one_line(str(message) if message is not None else e.message)


def _describe(failure: Exception) -> str:
    if isinstance(failure, openai.APIStatusError):
        return f"{failure.status_code} {_status_detail(failure)}"
    if isinstance(failure, openai.APITimeoutError):
        return "request timed out"
    if isinstance(failure, openai.APIConnectionError) and failure.__cause__ is not None:
        return _one_line(f"{failure.message} ({type(failure.__cause__).__name__}: {failure.__cause__})")
    return _one_line(str(failure))


# --- the body of a 200 ---------------------------------------------------------------------


# A finish reason or model name longer than this is not one: cut, never stored whole.
LABEL_CHARS = 200


def parse_completion(body: bytes) -> ModelReply:
    """The first choice of a chat completion, read from whatever a server sent with a 200.

    Raises:
        ModelResponseError: nothing usable came back (not JSON, not a completion, no choice,
            no message). Never about the text itself: bodies carry prompts and answers.
    """
    data = _load_json(body)
    message = _first_message(data)
    content = _content(message.get("content"))
    if content is None and isinstance(refusal := message.get("refusal"), str):
        content = refusal
    usage = data.get("usage")
    # A `\ud800` escape (text cut mid-character) would fail the reply's write: replaced.
    calls = [
        call.model_copy(
            update={
                "id": text_safe(call.id),
                "name": text_safe(call.name),
                "arguments": text_safe(call.arguments),
            }
        )
        for call in _tool_calls(message.get("tool_calls"))
    ]
    return ModelReply(
        content=None if content is None else text_safe(content),
        tool_calls=calls,
        prompt_tokens=_tokens(usage, "prompt_tokens"),
        completion_tokens=_tokens(usage, "completion_tokens"),
        finish_reason=_label(data["choices"][0].get("finish_reason")),
        response_model=_label(data.get("model")),
    )


def _label(value: object) -> str | None:
    """A short label the server sent (finish reason, model name), if it is a string: kept for
    spans, so bounded and made safe like any text from the server."""
    return text_safe(value[:LABEL_CHARS]) if isinstance(value, str) and value else None


def _load_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body, parse_int=_int_or_float)
    except (ValueError, RecursionError) as e:  # also bad UTF-8, and nesting deeper than the stack
        kind = "an HTML page" if body.lstrip()[:1] == b"<" else "a body that is not JSON"
        raise ModelResponseError(f"model endpoint answered 200 with {kind} ({len(body)} bytes)") from e
    if not isinstance(data, dict):
        raise ModelResponseError("model endpoint answered 200 with JSON that is not a chat completion")
    return data


def _int_or_float(text: str) -> int | float:
    # Python refuses to read an integer of more than 4,300 digits (a ValueError out of
    # json.loads); such a number is garbage wherever it stands, and one in `usage` must not
    # cost the whole reply.
    try:
        return int(text)
    except ValueError:
        return float(text)


def _first_message(data: dict[str, Any]) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        error = data.get("error")
        if isinstance(error, dict) and error.get("message") is not None:
            raise ModelResponseError(
                f"model endpoint answered 200 with an error: {_one_line(str(error['message']))}"
            )
        raise ModelResponseError("model endpoint answered 200 with no choices")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise ModelResponseError("model endpoint answered 200 with a choice that has no message")
    return message


def _content(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    parts = value if isinstance(value, list) else [value]
    texts = [text for part in parts if (text := _part_text(part)) is not None]
    return "".join(texts) if texts else None


def _part_text(part: object) -> str | None:
    if isinstance(part, str):
        return part
    if isinstance(part, dict):
        for key in ("text", "refusal"):
            if isinstance(text := part.get(key), str):
                return text
        return None  # an image or audio part: nothing the run can keep as text
    return None if part is None else str(part)


def _tool_calls(value: object) -> list[ToolCall]:
    entries = [value] if isinstance(value, dict) else value if isinstance(value, list) else []
    # A dict is a call whatever its `type` says (servers send null, "tool", or nothing): with
    # no usable name it reaches the model as an unknown tool, which it can act on, rather than
    # vanishing. A null or a string in the list carries nothing to act on.
    return [_tool_call(entry) for entry in entries if isinstance(entry, dict)]


def _tool_call(entry: dict[str, Any]) -> ToolCall:
    function = entry.get("function")
    if not isinstance(function, dict):
        function = {}
    return ToolCall(
        id=_text(entry.get("id"))[:MAX_ID_CHARS],
        name=_text(function.get("name"))[:MAX_NAME_CHARS],
        arguments=_arguments(function.get("arguments")),
    )


def _text(value: object) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


def _arguments(value: object) -> str:
    if value is None or value == "":
        return "{}"
    if isinstance(value, str):
        return value  # kept exactly: the model must see its own call unchanged next turn
    # Sent as an object (or a number): as JSON text, so execution validates it like any other.
    return json.dumps(value)


def _tokens(usage: object, key: str) -> int:
    value = usage.get(key) if isinstance(usage, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if not math.isfinite(value) or not 0 <= value <= MAX_TOKENS:
        return 0
    return int(value)


def build_openai_client(base_url: str | None, api_key: str) -> AsyncOpenAI:
    http_client = openai.DefaultAsyncHttpxClient(verify=tls_context())
    return AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=http_client)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The certificates `openai`'s HTTP client (httpx2) loads for each client it builds (the
    system's, or `SSL_CERT_FILE` / `SSL_CERT_DIR` as set when first asked), loaded once per
    process. Loading them is nearly all of a client's build (~16 ms on a quiet machine): a Lambda
    sandbox builds one client, but the local runtime builds the orchestrator anew for each
    runtime a process starts (one a test). A context is safe to share between connections,
    threads and event loops."""
    return httpx2.create_ssl_context()
