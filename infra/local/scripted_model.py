"""A scripted OpenAI-compatible model served on 127.0.0.1.

It answers `POST /v1/chat/completions` like the real API, so the real `openai` client and
our model client run unchanged; only the model's choices are scripted. `DemoResponder`
drives the demo prompts by rules; `ScriptResponder` plays back replies a test wrote, and
every request the server receives is kept for assertions.

A responder can also return a `RawResponse`, so tests can make the server misbehave the
way sloppy endpoints and proxies do: an HTML 200, garbled JSON, a body that is JSON but not a
completion, or bytes trickled out slowly enough to defeat a per-read timeout.
"""

import contextlib
import http
import json
import math
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from toolpipe.infra.local import stopping


@dataclass(frozen=True)
class Reply:
    content: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (tool, arguments)
    raw_arguments: dict[int, str] = field(default_factory=dict)  # index -> arguments text as sent
    raw_ids: dict[int, str] = field(default_factory=dict)  # index -> call id as sent


@dataclass(frozen=True)
class HttpError:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RawResponse:
    """Bytes sent as given, with only `content-type` and `content-length` filled in when missing.

    With `trickle_seconds_per_byte`, the server waits that long before each byte of the body,
    and of the status line and headers too when `trickle_headers` is set: every byte restarts
    a per-read timeout, so only a total deadline stops the client waiting. A long wait per
    byte with `trickle_headers` is a server that accepts the request and never answers.
    """

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    trickle_seconds_per_byte: float | None = None
    trickle_headers: bool = False


class EndpointRateLimit:
    """The rate limit of a provider's endpoint: `per_minute` requests a minute, `burst` at once
    after a quiet spell (GCRA, as the governor's). A request over it is answered 429 with the
    `Retry-After` (whole seconds, rounded up) that its turn is in, and never reaches the responder."""

    def __init__(
        self, per_minute: float, burst: int = 1, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._interval = 60 / per_minute
        self._tolerance = self._interval * (burst - 1)
        self._tat = 0.0
        self._clock = clock
        self._lock = threading.Lock()

    def take(self) -> float | None:
        """None: the request is within the limit (and counted); else the seconds until it is."""
        with self._lock:
            now = self._clock()
            allowed_at = self._tat - self._tolerance
            if now < allowed_at:
                return allowed_at - now
            self._tat = max(now, self._tat) + self._interval
            return None


Answer = Reply | HttpError | RawResponse
Responder = Callable[[dict[str, Any]], Answer]

# The prompt as a scripted model's refusals quote it: the run's error is cut at 200 characters.
_PREVIEW_CHARS = 40


def prompt_preview(prompt: str) -> str:
    """The prompt on one line, cut to a preview, quoted."""
    line = " ".join(prompt.split())
    return repr(line if len(line) <= _PREVIEW_CHARS else line[: _PREVIEW_CHARS - 1] + "…")


def _head(status: int, headers: dict[str, str]) -> bytes:
    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{name}: {value}" for name, value in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _completion(request: dict[str, Any], reply: Reply, counter: int) -> dict[str, Any]:
    calls = [
        {
            "id": reply.raw_ids.get(i, f"call_{counter}_{i}"),
            "type": "function",
            "function": {"name": name, "arguments": reply.raw_arguments.get(i, json.dumps(args))},
        }
        for i, (name, args) in enumerate(reply.tool_calls)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if calls:
        message["tool_calls"] = calls
    # A rough count (4 characters a token), labelled as such in the README: no tokenizer here.
    prompt_tokens = len(json.dumps(request.get("messages", []))) // 4
    completion_tokens = len(json.dumps(message)) // 4
    return {
        "id": f"chatcmpl-scripted-{counter}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "scripted"),
        "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop", "message": message}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class ScriptedModelServer:
    def __init__(
        self, responder: Responder, host: str = "127.0.0.1", port: int = 0, *, api_key: str | None = None
    ) -> None:
        self.responder = responder
        # When set, a request without `Authorization: Bearer <api_key>` gets the 401 a real
        # provider gives for a wrong key (and never reaches the responder).
        self.api_key = api_key
        self.refused_keys = 0
        # When set, requests over it get a 429 with Retry-After (counted in `rate_limited`).
        self.rate_limit: EndpointRateLimit | None = None
        self.rate_limited = 0
        # When each request within the limit arrived (time.monotonic()), in order.
        self.arrivals: list[float] = []
        # Each answer's status and when it was sent (time.time(), as execution histories stamp).
        self.answered: list[tuple[int, float]] = []
        self.requests: list[dict[str, Any]] = []
        # The client's port for each request in `requests`: equal ports mean a reused connection.
        self.client_ports: list[int] = []
        # Set each time a client hangs up on a response still being sent (a trickle cut short).
        self.hung_up = threading.Event()
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._connections: set[socket.socket] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            # Keep-alive, as real endpoints do, so a client's connection reuse can be measured.
            protocol_version = "HTTP/1.1"
            # Measured: with Nagle on and headers and body in two writes, delayed ACK added
            # ~40 ms to every call and hid everything else in timings.
            disable_nagle_algorithm = True

            def setup(self) -> None:
                super().setup()
                with server._lock:
                    server._connections.add(self.connection)

            def finish(self) -> None:
                with server._lock:
                    server._connections.discard(self.connection)
                super().finish()

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send_json(
                        400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}}
                    )
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                if (
                    server.api_key is not None
                    and self.headers.get("Authorization") != f"Bearer {server.api_key}"
                ):
                    with server._lock:
                        server.refused_keys += 1
                    self._send_json(
                        401,
                        {
                            "error": {
                                "message": "Incorrect API key provided.",
                                "type": "invalid_request_error",
                                "code": "invalid_api_key",
                            }
                        },
                    )
                    return
                wait = server.rate_limit.take() if server.rate_limit is not None else None
                if wait is not None:
                    with server._lock:
                        server.rate_limited += 1
                    self._send_json(
                        429,
                        {"error": {"message": "Rate limit reached for requests", "type": "requests"}},
                        {"retry-after": str(max(1, math.ceil(wait)))},
                    )
                    return
                with server._lock:
                    server.arrivals.append(time.monotonic())
                    server.requests.append(request)
                    server.client_ports.append(self.client_address[1])
                    counter = len(server.requests)
                answer = server.responder(request)
                if isinstance(answer, HttpError):
                    self._send_json(answer.status, answer.body, answer.headers)
                elif isinstance(answer, RawResponse):
                    self._send_raw(answer)
                else:
                    self._send_json(200, _completion(request, answer, counter))

            def _send_json(
                self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                self._send_raw(RawResponse(status, json.dumps(body).encode(), headers or {}))

            def _send_raw(self, answer: RawResponse) -> None:
                headers = dict(answer.headers)
                given = {name.lower() for name in headers}
                if "content-type" not in given:
                    headers["content-type"] = "application/json"
                if "content-length" not in given:
                    headers["content-length"] = str(len(answer.body))
                if any(n.lower() == "connection" and v.lower() == "close" for n, v in headers.items()):
                    self.close_connection = True
                head = _head(answer.status, headers)
                data = head + answer.body
                with server._lock:
                    server.answered.append((answer.status, time.time()))
                delay = answer.trickle_seconds_per_byte
                steady = 0 if delay is None else 0 if answer.trickle_headers else len(head)
                try:
                    if delay is None:
                        self.wfile.write(data)  # one write: see disable_nagle_algorithm
                        return
                    if steady:
                        self.wfile.write(data[:steady])
                    for i in range(steady, len(data)):
                        if server._closing.wait(delay):
                            break
                        self.wfile.write(data[i : i + 1])
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                    server.hung_up.set()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # requests carry prompts: keep them out of the console

        self._server = ThreadingHTTPServer((host, port), Handler)
        # Its stop wakes the serving loop (infra/local/stopping.py): the poll is a backstop.
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            args=(stopping.POLL_SECONDS,),
            name="scripted-model",
            daemon=True,
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> "ScriptedModelServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()  # ends trickles at once
        stopping.stop(self._server, self._thread)
        self._server.server_close()
        # Keep-alive connections would hold their handler threads until each client let go.
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # the client closed it first
                connection.shutdown(socket.SHUT_RDWR)


class ScriptResponder:
    """Plays back the given replies in order; a test fails loudly if the model is asked more."""

    def __init__(self, replies: list[Answer]) -> None:
        self._replies = list(replies)
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Answer:
        with self._lock:
            if not self._replies:
                return HttpError(
                    500, {"error": {"message": "the script has no more replies", "type": "script"}}
                )
            return self._replies.pop(0)


_NUMBER = r"(-?\d+(?:\.\d+)?)"


def _num(value: Any) -> str:
    number = float(value)
    return str(int(number)) if number.is_integer() else str(number)


def _alarm_time(text: str, timezone: str) -> str:
    """`07:30` as its next occurrence in the user's time zone (ISO-8601 with the offset), so a
    prompt such as "set an alarm at 07:30" never names a past time; other text as it is."""
    match = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", text)
    if match is None:
        return text
    try:
        zone: tzinfo = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        zone = UTC
    now = datetime.now(zone)
    ring = now.replace(hour=int(match.group(1)), minute=int(match.group(2)), second=0, microsecond=0)
    if ring <= now:
        ring += timedelta(days=1)
    return ring.isoformat()


class DemoResponder:
    """Rules for the demo prompts: arithmetic, square roots, the date and time, alarms, emails
    ("email ana@example.com saying the report is ready"), questions for the user ("ask me which
    city to book").

    Several matches in one prompt become parallel tool calls in one reply, as a real model
    would make them; tool results come back as a short plain-text answer.
    """

    def __call__(self, request: dict[str, Any]) -> Reply | HttpError:
        messages = request.get("messages", [])
        if not messages:
            return HttpError(
                400, {"error": {"message": "messages is empty", "type": "invalid_request_error"}}
            )
        prompt = self._handed_over(messages)
        if messages[-1].get("role") == "tool" and prompt is None:
            read = self._file_read(messages)
            if read is None:
                return Reply(content=self._answer(messages))
            # A file a trigger started the run for: do what it asks, or say what it holds.
            asked = self._calls(read, self._timezone(messages))  # read_input's agent: any tools
            return Reply(tool_calls=asked) if asked else Reply(content=f"The file says: {read.strip()[:500]}")
        if prompt is None:
            prompt = str(messages[-1].get("content") or "")
        if "read_input tool" in prompt:
            return Reply(tool_calls=[("read_input", {})])
        # As a real model does: only the tools the request offers.
        offered = {
            t.get("function", {}).get("name") for t in request.get("tools") or [] if isinstance(t, dict)
        }
        calls = [c for c in self._calls(prompt, self._timezone(messages)) if c[0] in offered]
        transfers = sorted(name for name in offered if name and name.startswith("transfer_to_"))
        if not calls and transfers:
            # A front-desk agent with none of the tools asked for: hand the request on.
            return Reply(tool_calls=[(transfers[0], {})])
        if not calls:
            return self._cannot(prompt)
        return Reply(tool_calls=calls)

    @staticmethod
    def _cannot(prompt: str) -> HttpError:
        """A prompt none of the demo's rules can do: an answer would end the run `succeeded`
        without doing what was asked, so it refuses (a 400 is never retried; the run fails with
        this one line)."""
        message = (
            f"the demo model cannot do {prompt_preview(prompt)}: it calls only the example's tools (sums, square "
            "roots, time, alarms); use --scripted-model FILE or OPENAI_BASE_URL"
        )
        return HttpError(400, {"error": {"message": message, "type": "invalid_request_error"}})

    @staticmethod
    def _handed_over(messages: list[dict[str, Any]]) -> str | None:
        """The user's request, when the last reply was a transfer to the agent asked now: it
        starts on the request, as a real model reads the conversation it was handed."""
        if messages[-1].get("role") != "tool":
            return None
        reply: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "assistant"), {})
        names = [c["function"]["name"] for c in reply.get("tool_calls") or []]
        if not any(name.startswith("transfer_to_") for name in names):
            return None
        asked: dict[str, Any] = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        return str(asked.get("content") or "")

    @staticmethod
    def _file_read(messages: list[dict[str, Any]]) -> str | None:
        """The text `read_input` returned, if the last reply was that one call (its first line
        is the byte range)."""
        reply = next(m for m in reversed(messages) if m.get("role") == "assistant")
        calls = reply.get("tool_calls") or []
        if len(calls) != 1 or calls[0]["function"]["name"] != "read_input":
            return None
        return str(messages[-1].get("content") or "").partition("\n")[2]

    @staticmethod
    def _timezone(messages: list[dict[str, Any]]) -> str:
        system = str(messages[0].get("content") or "") if messages[0].get("role") == "system" else ""
        match = re.search(r"time zone is ([\w/+-]+)", system)
        return match.group(1) if match else "UTC"

    @staticmethod
    def _calls(prompt: str, timezone: str) -> list[tuple[str, dict[str, Any]]]:
        text = prompt.lower()
        calls: list[tuple[str, dict[str, Any]]] = []
        for match in re.finditer(rf"square root of {_NUMBER}", text):
            calls.append(("square_root", {"x": float(match.group(1))}))
        # Not inside a time or a date ("07:30:00+01:00" holds "00+01").
        plus = rf"(?<![\d:.T-]){_NUMBER} ?\+ ?{_NUMBER}(?![\d:])"
        for match in re.finditer(rf"(?:sum of|add) {_NUMBER} and {_NUMBER}|{plus}", text):
            a, b = [g for g in match.groups() if g is not None]
            calls.append(("sum", {"a": float(a), "b": float(b)}))
        if re.search(r"\b(time|date|today)\b", text) and "alarm" not in text:
            calls.append(("get_current_date_time", {"timezone": timezone}))
        for match in re.finditer(r"alarm (?:at|for) (\S+)", prompt, flags=re.IGNORECASE):
            calls.append(("set_alarm", {"time": _alarm_time(match.group(1).rstrip(".?!"), timezone)}))
        for match in re.finditer(r"email (\S+@[\w.-]+\w) saying (.+)", prompt, flags=re.IGNORECASE):
            body = match.group(2).strip()
            calls.append(("send_email", {"to": match.group(1), "subject": body[:60], "body": body}))
        # "Ask me which city to book": a question for the user (the example's ask_user).
        for match in re.finditer(r"\bask me (.+)", prompt, flags=re.IGNORECASE):
            question = match.group(1).strip().rstrip(".?!")
            calls.append(("ask_user", {"question": question[:1].upper() + question[1:] + "?"}))
        return calls

    @staticmethod
    def _answer(messages: list[dict[str, Any]]) -> str:
        results: dict[str, str] = {}
        for message in reversed(messages):
            if message.get("role") != "tool":
                break
            results[message["tool_call_id"]] = str(message.get("content"))
        request_message = next(m for m in reversed(messages) if m.get("role") == "assistant")
        sentences = []
        for call in request_message.get("tool_calls", []):
            name, args = call["function"]["name"], json.loads(call["function"]["arguments"] or "{}")
            result = results.get(call["id"], "no result")
            if result.startswith("Error"):
                sentences.append(f"{name} failed: {result}")
            elif name == "square_root":
                sentences.append(f"The square root of {_num(args['x'])} is {result}.")
            elif name == "sum":
                sentences.append(f"{_num(args['a'])} + {_num(args['b'])} = {result}.")
            elif name == "get_current_date_time":
                sentences.append(f"It is now {result} ({args.get('timezone', 'UTC')}).")
            else:
                sentences.append(result)
        return " ".join(sentences)
