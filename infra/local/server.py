"""`toolpipe serve`: the local runtime as one long-lived process that answers HTTP.

The server stands in for API Gateway in front of the `api` function: each HTTP request under
the deployed stage (`/v1`) becomes the REST API *proxy* event the function gets on AWS (method,
path, resource and path parameters, query and headers single and multi-valued, body, and a
request context with the stage, the resource path and the caller's identity), and the proxy
response goes back as status, headers and body. The runs, the workers and moto's Step
Functions interpreter all live in this one process, so any number of CLI and HTTP clients share
one state and no run is lost.

Local-only routes (the deployed API has none of them):
- `GET /v1/runs/{run_id}/events`: the run's history as server-sent events, in slot order.
- `GET /_local/health`: the server's pid and model, for discovery.

Identity: API Gateway authenticates callers with IAM and reports the signer's ARN in
`requestContext.identity.userArn`. Locally every request is from `LOCAL_CALLER`, unless it
carries `X-Toolpipe-Caller: <arn>` (an empty value sends no identity at all, which the API
answers with 403). Anyone who can reach the port can claim any identity that way: the server
binds 127.0.0.1 unless told otherwise.
"""

import base64
import contextlib
import json
import logging
import os
import re
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from email.utils import formatdate
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Protocol

from moto.core.botocore_stubber import BotocoreStubber

from toolpipe.infra.cdk.functions import API
from toolpipe.infra.local import lambdas
from toolpipe.infra.local.client import CALLER_HEADER, HEALTH_PATH, STAGE, http_url
from toolpipe.infra.local.runtime import LOCAL_CALLER

if TYPE_CHECKING:
    from toolpipe.infra.local.runtime import LocalRuntime

log = logging.getLogger(__name__)

# The REST API's resources (infra/cdk/stack.py) and the methods each one has.
RESOURCES: dict[str, tuple[str, ...]] = {
    "/openapi.json": ("GET",),
    "/runs": ("GET", "POST"),
    "/runs/{run_id}": ("GET", "DELETE"),
    "/runs/{run_id}/cancel": ("POST",),
    "/runs/{run_id}/resume": ("POST",),
    "/runs/{run_id}/fork": ("POST",),
    "/runs/{run_id}/messages": ("GET",),
    "/runs/{run_id}/messages/{seq}": ("GET",),
    "/runs/{run_id}/timeline": ("GET",),
    # The timeline pages (README "The timeline page"), behind the same identity as the rest.
    "/ui/runs": ("GET",),
    "/ui/runs/{run_id}": ("GET",),
    "/approvals": ("GET",),
    "/approvals/{approval_id}": ("GET",),
    "/approvals/{approval_id}/approve": ("POST",),
    "/approvals/{approval_id}/deny": ("POST",),
    "/approvals/{approval_id}/answer": ("POST",),
    "/runs/{run_id}/calls/{call_id}/result": ("POST",),
    # The approval page (README "The approval link"): no identity needed, the link is signed.
    "/approvals/{approval_id}/page": ("GET", "HEAD", "POST"),
}
EVENTS_RESOURCE = "/runs/{run_id}/events"
MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's payload limit
# Where the in-process orchestrator makes approval links (the stack sets it from the API's URL).
LINK_BASE_ENV = "TOOLPIPE_LINK_BASE_URL"
RUNNING = "running"
KEEPALIVE_SECONDS = 10.0  # a comment line this often: a client that went away is noticed at the write
MAX_STREAM_SECONDS = 3600.0
DEFAULT_STREAM_SECONDS = 300.0


# --- HTTP request -> API Gateway proxy event --------------------------------------------------


def match_resource(path: str) -> tuple[str, dict[str, str]] | None:
    """The resource template a path falls under and its path parameters, as API Gateway matches."""
    segments = path.strip("/").split("/")
    for template in (*RESOURCES, EVENTS_RESOURCE):
        parts = template.strip("/").split("/")
        if len(parts) != len(segments):
            continue
        parameters: dict[str, str] = {}
        for part, segment in zip(parts, segments, strict=True):
            if part.startswith("{"):
                if not segment:
                    break
                parameters[part[1:-1]] = urllib.parse.unquote(segment)
            elif part != segment:
                break
        else:
            return template, parameters
    return None


def proxy_event(
    method: str,
    path: str,
    query: str,
    headers: list[tuple[str, str]],
    body: bytes,
    caller: str | None,
    *,
    source_ip: str = "127.0.0.1",
) -> dict[str, Any]:
    """The REST API proxy event for a request to `path` (relative to the stage) on a known resource."""
    matched = match_resource(path)
    resource, parameters = matched if matched else (path, {})
    values = urllib.parse.parse_qs(query, keep_blank_values=True)
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for name, value in headers:
        single[name] = value  # API Gateway keeps the last of repeated headers here
        multi.setdefault(name, []).append(value)
    try:
        text, encoded = body.decode(), False
    except UnicodeDecodeError:
        # Not text: handed over base64-encoded, as API Gateway does for a binary payload.
        text, encoded = base64.b64encode(body).decode(), True
    now = datetime.now(UTC)
    identity: dict[str, Any] = {"sourceIp": source_ip, "userAgent": single.get("User-Agent")}
    if caller is not None:
        identity.update(userArn=caller, caller=caller.rsplit("/", 1)[-1], user=caller.rsplit("/", 1)[-1])
    return {
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": single or None,
        "multiValueHeaders": multi or None,
        "queryStringParameters": {k: v[-1] for k, v in values.items()} or None,
        "multiValueQueryStringParameters": values or None,
        "pathParameters": parameters or None,
        "stageVariables": None,
        "requestContext": {
            "accountId": "000000000000",
            "apiId": "local",
            "resourceId": "local",
            "resourcePath": resource,
            "httpMethod": method,
            "path": f"/{STAGE}{path}",
            "stage": STAGE,
            "protocol": "HTTP/1.1",
            "requestId": str(uuid.uuid4()),
            "requestTime": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "requestTimeEpoch": int(now.timestamp() * 1000),
            "identity": identity,
        },
        "body": text if body else None,
        "isBase64Encoded": encoded,
    }


class ApiFunction:
    """The `api` function, invoked as Lambda invokes it: one event at a time per instance.

    One at a time is not only faithful: Powertools' resolver keeps the event being handled on
    the module-level `app`, so two requests handled at once could read each other's caller.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            try:
                response = lambdas.call_function(API, event)
            except Exception:
                # What API Gateway answers when the function itself fails.
                log.exception("api function failed")
                return {"statusCode": 502, "body": json.dumps({"message": "Internal server error"})}
        return dict(response)

    def get(
        self, path: str, caller: str | None, headers: list[tuple[str, str]] | None = None
    ) -> tuple[int, Any]:
        """A GET through the same proxy event as HTTP, so the same authorization applies."""
        resource, _, query = path.partition("?")
        response = self(proxy_event("GET", resource, query, headers or [], b"", caller))
        body = response.get("body")
        return int(response["statusCode"]), json.loads(body) if body else None


# --- history changes, for the event stream --------------------------------------------------

_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
_RUN_KEY = re.compile(rb'"pk"\s*:\s*\{\s*"S"\s*:\s*"RUN#([A-Za-z0-9_-]{1,64})"')


class RunChanges:
    """Wakes whoever watches a run when a DynamoDB write names the run's partition.

    Every item of a run (record, history, claims) lives under `pk=RUN#<id>`, and every write the
    handlers make goes through moto's request dispatch: one wrapper there sees them all, so an
    event stream waits for a change instead of querying the table on a timer.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._versions: dict[str, int] = {}
        self._watchers: dict[str, int] = {}
        self._closed = False

    @contextlib.contextmanager
    def watch(self, run_id: str) -> Iterator[None]:
        with self._changed:
            self._watchers[run_id] = self._watchers.get(run_id, 0) + 1
            self._versions.setdefault(run_id, 0)
        try:
            yield
        finally:
            with self._changed:
                self._watchers[run_id] -= 1
                if not self._watchers[run_id]:
                    del self._watchers[run_id], self._versions[run_id]

    def version(self, run_id: str) -> int:
        with self._changed:
            return self._versions.get(run_id, 0)

    def wait(self, run_id: str, seen: int, timeout: float) -> bool:
        """Wait until the run changed after version `seen`; False on timeout or close."""
        with self._changed:
            return (
                self._changed.wait_for(lambda: self._closed or self._versions.get(run_id, 0) != seen, timeout)
                and not self._closed
            )

    @property
    def closed(self) -> bool:
        with self._changed:
            return self._closed

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def request_served(self, target: str, body: bytes) -> None:
        if not self._watchers or target.rpartition(".")[2] not in _WRITES:
            return  # nobody watching, or a read: the common cases cost a dict check
        runs = {m.decode() for m in _RUN_KEY.findall(body)}
        with self._changed:
            woken = False
            for run_id in runs & self._watchers.keys():
                self._versions[run_id] += 1
                woken = True
            if woken:
                self._changed.notify_all()


_hook_lock = threading.Lock()
_listeners: list[RunChanges] = []
_hooked = False


class _LinkBases:
    """The base URL links are made under, while servers run in this process (tests start
    several, overlapping): the newest running one's, and what was set before any, after. A
    base you set yourself (`TOOLPIPE_LINK_BASE_URL`: a tunnel, the address others reach a
    server on 0.0.0.0 by) wins over every server's own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: list[str] = []
        self._before: str | None = None

    def enter(self, url: str) -> None:
        with self._lock:
            if not self._running:
                self._before = os.environ.get(LINK_BASE_ENV)
            self._running.append(url)
            os.environ[LINK_BASE_ENV] = self._before or url

    def leave(self, url: str) -> None:
        with self._lock:
            if url in self._running:
                self._running.remove(url)
            now = self._before or (self._running[-1] if self._running else None)
            if now is None:
                os.environ.pop(LINK_BASE_ENV, None)
            else:
                os.environ[LINK_BASE_ENV] = now


_link_bases = _LinkBases()


def _install_change_hook() -> None:
    """Wrap moto's request dispatch once per process, to tell `RunChanges` about writes."""
    global _hooked
    with _hook_lock:
        if _hooked:
            return
        dispatch = BotocoreStubber.process_request

        def process_request(self: BotocoreStubber, request: Any) -> Any:
            response = dispatch(self, request)
            if _listeners:
                target = request.headers.get("X-Amz-Target") or b""
                target = target.decode() if isinstance(target, bytes) else str(target)
                if target.startswith("DynamoDB"):
                    body = request.body or b""
                    body = body.encode() if isinstance(body, str) else bytes(body)
                    for listener in list(_listeners):
                        listener.request_served(target, body)
            return response

        BotocoreStubber.process_request = process_request  # type: ignore[method-assign]
        _hooked = True


def publishable(items: list[dict[str, Any]], published: int, ended: bool) -> list[dict[str, Any]]:
    """Which history items to publish next, after seq `published`, in slot order.

    Results have reserved slots and land in any order: while the run goes on, stop at the first
    slot still empty, so no item is skipped and none is published twice. Once the run ended,
    nothing more will land: publish the rest (a slot a failed run never filled stays empty).
    """
    ready = []
    for item in sorted(items, key=lambda i: int(i["seq"])):
        seq = int(item["seq"])
        if seq <= published:
            continue
        if not ended and seq != published + 1:
            break
        ready.append(item)
        published = seq
    return ready


# --- the HTTP server --------------------------------------------------------------------------


def _response_bytes(status: int, headers: list[tuple[str, str]], body: bytes) -> bytes:
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    head = [f"HTTP/1.1 {status} {reason}", f"Date: {formatdate(usegmt=True)}", "Server: toolpipe-local"]
    head += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def _json_response(status: int, body: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    data = json.dumps(body).encode()
    return status, [("Content-Type", "application/json")], data


class _Listener(ThreadingHTTPServer):
    # socketserver's default backlog is 5: a burst of clients (40 `toolpipe run` at once) had its
    # connections reset before a thread could take them. The kernel caps it at somaxconn.
    request_queue_size = 1024


class LocalServer:
    """`with LocalServer(runtime) as server:` HTTP on `server.url`, until the block ends.

    Args:
        runtime: The started runtime whose API function and state the requests reach.
        host: The address to bind; 127.0.0.1 keeps the local identity header to this machine.
        port: 0 picks a free port.
        health: Extra fields for the health route (the model the server uses).
    """

    def __init__(
        self,
        runtime: "LocalRuntime",
        host: str = "127.0.0.1",
        port: int = 0,
        health: dict[str, Any] | None = None,
    ) -> None:
        self.runtime = runtime
        self.api = ApiFunction()
        self.changes = RunChanges()
        self.draining = threading.Event()
        self._health = health or {}
        self._active = 0
        self._last_activity = time.monotonic()
        self._state = threading.Condition()
        self._connections: set[socket.socket] = set()
        self._saved_api_url: str | None = None
        self._http = _Listener((host, port), self._handler_class())
        self._http.daemon_threads = True
        self._thread = threading.Thread(
            target=self._http.serve_forever, args=(0.05,), name="local-api", daemon=True
        )

    @property
    def url(self) -> str:
        return http_url(self._http.server_address)

    @property
    def api_url(self) -> str:
        return f"{self.url}/{STAGE}"

    def __enter__(self) -> "LocalServer":
        _link_bases.enter(self.api_url)
        _install_change_hook()
        with _hook_lock:
            _listeners.append(self.changes)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def idle_seconds(self) -> float:
        """How long no request has been in progress (0 while one is)."""
        with self._state:
            return 0.0 if self._active else time.monotonic() - self._last_activity

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is in progress; False if one still is after `timeout`."""
        with self._state:
            return self._state.wait_for(lambda: not self._active, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Stop accepting, end the event streams, let requests in progress finish (bounded)."""
        self.draining.set()
        self._http.shutdown()
        self.changes.close()
        deadline = time.monotonic() + timeout
        with self._state:
            self._state.wait_for(lambda: not self._active, timeout)
            # Idle keep-alive connections hold a thread each, waiting for a next request.
            for connection in list(self._connections):
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
            self._state.wait_for(lambda: not self._connections, max(0.0, deadline - time.monotonic()))
        self._http.server_close()
        _link_bases.leave(self.api_url)
        with _hook_lock:
            if self.changes in _listeners:
                _listeners.remove(self.changes)

    @contextlib.contextmanager
    def _request(self) -> Iterator[None]:
        with self._state:
            self._active += 1
        try:
            yield
        finally:
            with self._state:
                self._active -= 1
                self._last_activity = time.monotonic()
                self._state.notify_all()

    # --- routes ---------------------------------------------------------------------------

    def handle(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request that is not an event stream: status, headers, body."""
        path, _, query = target.partition("?")
        if path == HEALTH_PATH:
            if self.draining.is_set():
                return _json_response(503, {"message": "the local server is shutting down"})
            return _json_response(200, {"status": "ok", **self._health})
        prefix = f"/{STAGE}"
        if path != prefix and not path.startswith(prefix + "/"):
            return _json_response(
                404, {"message": f"not found: the API is under {prefix}, e.g. {prefix}/runs"}
            )
        path = path[len(prefix) :] or "/"
        matched = match_resource(path)
        if matched is None or matched[0] not in RESOURCES or method not in RESOURCES[matched[0]]:
            # What API Gateway answers for a resource or method the API does not have.
            return _json_response(403, {"message": "Missing Authentication Token"})
        if method == "POST" and self.draining.is_set():
            # Nothing written: the client may send it again, to the next server.
            return _json_response(503, {"message": "the local server is shutting down"})
        response = self.api(proxy_event(method, path, query, _forwarded(headers), body, _caller(headers)))
        return _map_response(response)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Nagle plus delayed ACK add ~40 ms to a response sent in two writes: one write, no Nagle.
            disable_nagle_algorithm = True
            # A client that stops sending (or reading) mid-request is dropped after this long,
            # instead of holding a thread and keeping an idle server from exiting.
            timeout = 60

            def setup(self) -> None:
                super().setup()
                with server._state:
                    server._connections.add(self.connection)

            def finish(self) -> None:
                with contextlib.suppress(OSError):
                    super().finish()
                with server._state:
                    server._connections.discard(self.connection)
                    server._state.notify_all()

            def _dispatch(self) -> None:
                with server._request():
                    try:
                        self._respond()
                    except (BrokenPipeError, ConnectionResetError):
                        self.close_connection = True  # the client went away: nothing to answer

            def _respond(self) -> None:
                headers = list(self.headers.items())
                if self.headers.get("Transfer-Encoding"):
                    self._send(*_json_response(411, {"message": "send the body with a Content-Length"}))
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if length < 0:
                    self._send(*_json_response(400, {"message": "invalid Content-Length"}))
                    return
                if length > MAX_BODY_BYTES:
                    self.close_connection = True  # the body is not read: the connection cannot go on
                    self._send(*_json_response(413, {"message": "Request Too Long"}))
                    return
                body = self.rfile.read(length) if length else b""
                if len(body) < length:
                    self.close_connection = True  # the client hung up mid-body
                    return
                path = self.path.partition("?")[0]
                if self.command == "GET" and path.startswith(f"/{STAGE}/"):
                    matched = match_resource(path[len(STAGE) + 1 :])
                    if matched is not None and matched[0] == EVENTS_RESOURCE:
                        self._stream(matched[1]["run_id"], headers)
                        return
                self._send(*server.handle(self.command, self.path, headers, body))

            def _send(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
                headers = [(n, v) for n, v in headers if n.lower() not in ("content-length", "connection")]
                headers.append(("Content-Length", str(len(body))))
                if self.close_connection or server.draining.is_set():
                    headers.append(("Connection", "close"))
                    self.close_connection = True
                self.wfile.write(_response_bytes(status, headers, b"" if self.command == "HEAD" else body))

            def _stream(self, run_id: str, headers: list[tuple[str, str]]) -> None:
                query = urllib.parse.parse_qs(self.path.partition("?")[2])
                try:
                    timeout = float(query.get("timeout", [DEFAULT_STREAM_SECONDS])[-1])
                    after = int(self.headers.get("Last-Event-ID") or query.get("after", ["0"])[-1])
                except ValueError:
                    self._send(
                        *_json_response(400, {"message": "invalid request: timeout is seconds, after a seq"})
                    )
                    return
                if not 0 < timeout <= MAX_STREAM_SECONDS or after < 0:
                    message = f"invalid request: timeout is 0 to {MAX_STREAM_SECONDS:g} s, after a seq"
                    self._send(*_json_response(400, {"message": message}))
                    return
                self.close_connection = True  # a stream ends with its connection (no chunked encoding)
                server.stream_events(run_id, _caller(headers), after, timeout, self.wfile.write, self._send)

            def __getattr__(self, name: str) -> Any:
                # http.server answers a method it finds no `do_<METHOD>` for with 501 and an HTML
                # page. API Gateway answers every method (TRACE, PROPFIND, a lowercase `get`...),
                # one the API does not declare with 403 (`LocalServer.handle`): so does this.
                if name.startswith("do_"):
                    return self._dispatch
                raise AttributeError(name)

            def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
                # What http.server refuses before a method runs (a request line or headers it
                # cannot read): answered in JSON like everything else, never its HTML page.
                self.close_connection = True
                phrase = HTTPStatus(code).phrase if code in HTTPStatus._value2member_map_ else "error"
                self._send(*_json_response(code, {"message": message or phrase}))

            def log_message(self, format: str, *args: Any) -> None:
                pass  # request lines carry run ids and the like: keep the console for what matters

        return Handler

    def stream_events(
        self, run_id: str, caller: str | None, after: int, timeout: float, write: Any, send: Any
    ) -> None:
        """Publish the run's history items after seq `after` as server-sent events, then `end`.

        Authorized as `GET /runs/{run_id}` is: a run that is not the caller's is a 404 here too.
        """
        deadline = time.monotonic() + timeout
        with self.changes.watch(run_id):
            seen = self.changes.version(run_id)
            status, body = self.api.get(f"/runs/{urllib.parse.quote(run_id)}", caller)
            if status != 200:
                send(*_json_response(status, body))
                return
            write(
                _response_bytes(
                    200,
                    [
                        ("Content-Type", "text/event-stream"),
                        ("Cache-Control", "no-cache"),
                        ("Connection", "close"),
                    ],
                    b": stream of run history items in slot order\n\n",
                )
            )
            published = after
            announced: set[str] = set()
            last: dict[str, Any] | None = None
            while True:
                record = body["run"]
                ended = record["status"] != RUNNING
                items = self._messages(run_id, caller, published)
                ready = publishable(items, published, ended)
                for item in ready:
                    write(_event("item", item, event_id=int(item["seq"])))
                    published = int(item["seq"])
                    last = item
                waiting = len(ready) < len(items) or (last is not None and bool(last.get("tool_calls")))
                if not ended and waiting:
                    # Results are awaited: some call may wait for a person. Told once each.
                    for approval in self._pending_approvals(run_id, caller):
                        if approval["approval_id"] not in announced:
                            announced.add(approval["approval_id"])
                            write(_event("approval", approval))
                if ended:
                    write(_event("end", {"status": record["status"], "run": record}))
                    return
                wait = max(0.0, min(KEEPALIVE_SECONDS, deadline - time.monotonic()))
                changed = self.changes.wait(run_id, seen, wait)
                if self.changes.closed:
                    write(_event("error", {"message": "the local server is shutting down"}))
                    return
                if not changed:
                    if time.monotonic() >= deadline:
                        write(_event("timeout", {"status": record["status"], "after_seconds": timeout}))
                        return
                    write(b": keep-alive\n\n")
                seen = self.changes.version(run_id)
                status, body = self.api.get(f"/runs/{urllib.parse.quote(run_id)}", caller)
                if status != 200:
                    write(_event("error", body if isinstance(body, dict) else {"message": str(body)}))
                    return

    def _pending_approvals(self, run_id: str, caller: str | None) -> list[dict[str, Any]]:
        # With this server's host: each approval's signed link is made under the URL it serves.
        host = urllib.parse.urlsplit(self.url).netloc
        status, body = self.api.get("/approvals?status=pending", caller, [("Host", host)])
        if status != 200:
            return []
        return [a for a in body["approvals"] if a["run_id"] == run_id]

    def _messages(self, run_id: str, caller: str | None, after: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        page: str | None = f"/runs/{urllib.parse.quote(run_id)}/messages?after={after}"
        while page:
            status, body = self.api.get(page, caller)
            if status != 200:
                raise RuntimeError(f"reading run {run_id}'s history answered {status}")
            items.extend(body["messages"])
            page = body["next"]
        return items


def _event(name: str, data: Any, event_id: int | None = None) -> bytes:
    lines = [f"event: {name}"]
    if event_id is not None:
        lines.insert(0, f"id: {event_id}")
    lines.append(f"data: {json.dumps(data)}")  # json.dumps never emits a newline: one data line
    return ("\n".join(lines) + "\n\n").encode()


def _caller(headers: list[tuple[str, str]]) -> str | None:
    for name, value in headers:
        if name.lower() == CALLER_HEADER.lower():
            return value.strip() or None
    return LOCAL_CALLER


def _forwarded(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    # The identity header is the local stand-in for IAM: the function only ever sees its result.
    return [(n, v) for n, v in headers if n.lower() != CALLER_HEADER.lower()]


def _map_response(response: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
    """A proxy response as HTTP: status, single and multi-valued headers, body (base64 decoded)."""
    headers: list[tuple[str, str]] = []
    multi = response.get("multiValueHeaders") or {}
    for name, values in multi.items():
        headers.extend((name, str(v)) for v in values)
    for name, value in (response.get("headers") or {}).items():
        if name not in multi:
            headers.append((name, str(value)))
    raw = response.get("body") or ""
    body = base64.b64decode(raw) if response.get("isBase64Encoded") else str(raw).encode()
    return int(response["statusCode"]), headers, body


# --- `toolpipe serve` -------------------------------------------------------------------------


class Idle(Protocol):
    """A server that can say how long it has had no request in progress."""

    def idle_seconds(self) -> float: ...


def serve_until_stopped(
    runtime: "LocalRuntime",
    server: LocalServer,
    stop: threading.Event,
    hurry: threading.Event,
    idle_exit: float | None,
    also_serving: Sequence[Idle] = (),
) -> None:
    """Serve until `stop` (a signal) or, with `idle_exit`, until idle that long; then drain.

    Draining refuses new runs (503, nothing written, so clients send them to the next server)
    while reads and event streams go on, until the runs in progress end, `runtime.drain_seconds`
    pass or `hurry` (a second signal) is set; the runtime's own exit stops whatever is left.
    Requests to `also_serving` (the AWS endpoint) count as activity too.
    """
    while not stop.wait(0.1):
        idle = min(s.idle_seconds() for s in (server, *also_serving))
        if idle_exit is not None and idle >= idle_exit and not _running(runtime):
            break
    server.draining.set()
    deadline = time.monotonic() + runtime.drain_seconds
    while _running(runtime) and time.monotonic() < deadline and not hurry.wait(0.05):
        pass
    # The drain is over (its time spent, or a second signal): the runtime's exit stops the
    # executions still running at once, rather than drain for as long again.
    runtime.drain_seconds = 0.0


def _running(runtime: "LocalRuntime") -> bool:
    return bool(
        runtime.sfn.list_executions(stateMachineArn=runtime.state_machine_arn, statusFilter="RUNNING")[
            "executions"
        ]
    )
