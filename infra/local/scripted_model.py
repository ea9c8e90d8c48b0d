"""A scripted OpenAI-compatible model served on 127.0.0.1.

It answers `POST /v1/chat/completions` like the real API, so the real `openai` client and
our model client run unchanged; only the model's choices are scripted. `DemoResponder`
drives the demo prompts by rules; `ScriptResponder` plays back replies a test wrote, and
every request the server receives is kept for assertions.
"""

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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


Responder = Callable[[dict[str, Any]], Reply | HttpError]


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
    def __init__(self, responder: Responder, host: str = "127.0.0.1", port: int = 0) -> None:
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(
                        400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}}
                    )
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                with server._lock:
                    server.requests.append(request)
                    counter = len(server.requests)
                answer = server.responder(request)
                if isinstance(answer, HttpError):
                    self._send(answer.status, answer.body, answer.headers)
                else:
                    self._send(200, _completion(request, answer, counter))

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # requests carry prompts: keep them out of the console

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-model", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> "ScriptedModelServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class ScriptResponder:
    """Plays back the given replies in order; a test fails loudly if the model is asked more."""

    def __init__(self, replies: list[Reply | HttpError]) -> None:
        self._replies = list(replies)
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Reply | HttpError:
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


class DemoResponder:
    """Rules for the demo prompts: arithmetic, square roots, the date and time, alarms.

    Several matches in one prompt become parallel tool calls in one reply, as a real model
    would make them; tool results come back as a short plain-text answer.
    """

    def __call__(self, request: dict[str, Any]) -> Reply | HttpError:
        messages = request.get("messages", [])
        if not messages:
            return HttpError(
                400, {"error": {"message": "messages is empty", "type": "invalid_request_error"}}
            )
        if messages[-1].get("role") == "tool":
            return Reply(content=self._answer(messages))
        prompt = str(messages[-1].get("content") or "")
        calls = self._calls(prompt, self._timezone(messages))
        if not calls:
            return Reply(
                content="I am toolpipe's scripted demo model. Ask me for a square root, a sum, "
                "the current date and time, or an alarm."
            )
        return Reply(tool_calls=calls)

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
        for match in re.finditer(rf"(?:sum of|add) {_NUMBER} and {_NUMBER}|{_NUMBER} ?\+ ?{_NUMBER}", text):
            a, b = [g for g in match.groups() if g is not None]
            calls.append(("sum", {"a": float(a), "b": float(b)}))
        if re.search(r"\b(time|date|today)\b", text) and "alarm" not in text:
            calls.append(("get_current_date_time", {"timezone": timezone}))
        for match in re.finditer(r"alarm (?:at|for) (\S+)", prompt, flags=re.IGNORECASE):
            calls.append(("set_alarm", {"time": match.group(1).rstrip(".?!")}))
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
