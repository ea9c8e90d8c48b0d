"""`toolpipe serve`: the local runtime as one long-lived process that answers HTTP.

The server stands in for API Gateway in front of the `api` function (`api_proxy.py`: each
request becomes the proxy event the function gets on AWS). The runs, the workers and moto's
Step Functions interpreter all live in this one process, so any number of CLI and HTTP clients
share one state and no run is lost.

Local-only routes (the deployed API has none of them):
- `GET /v1/runs/{run_id}/events`: the run's history as server-sent events, in slot order
  (`run_changes.py` says when a run changed).
- `GET /_local/health`: the server's pid and model, for discovery.
- `POST /_local/release`, from the command that started the server (`starter`): that command
  is done with it, so it stops sooner once idle (`serve_loop.py`).

Anyone who can reach the port can claim any identity (`X-Toolpipe-Caller`): the server binds
127.0.0.1 unless told otherwise.
"""

import contextlib
import hmac
import json
import math
import os
import select
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from email.utils import formatdate
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Protocol

from toolpipe.infra.local import stopping
from toolpipe.infra.local.api_proxy import (
    EVENTS_RESOURCE,
    MAX_BODY_BYTES,
    RESOURCES,
    ApiFunction,
    forwarded,
    map_response,
    match_resource,
    proxy_event,
    request_caller,
)
from toolpipe.infra.local.client import HEALTH_PATH, RELEASE_PATH, STAGE, STARTER_HEADER, http_url
from toolpipe.infra.local.run_changes import RunChanges, listen, publishable, sse_event, stop_listening

if TYPE_CHECKING:
    from toolpipe.infra.local.runtime import LocalRuntime


class AppState(Protocol):
    """The app a server runs, as it follows its files (`app_reload.AppReloader`)."""

    @property
    def version(self) -> str | None: ...

    @property
    def error(self) -> str | None: ...


# Where the in-process orchestrator makes approval links (the stack sets it from the API's URL).
LINK_BASE_ENV = "TOOLPIPE_LINK_BASE_URL"
RUNNING = "running"
KEEPALIVE_SECONDS = 10.0  # a comment line this often: a client that went away is noticed at the write
MAX_STREAM_SECONDS = 3600.0
DEFAULT_STREAM_SECONDS = 300.0
GONE_CHECK_SECONDS = 0.25  # how often an event stream looks whether its client went away


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

# --- the HTTP server --------------------------------------------------------------------------


def _response_bytes(status: int, headers: list[tuple[str, str]], body: bytes) -> bytes:
    reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
    head = [f"HTTP/1.1 {status} {reason}", f"Date: {formatdate(usegmt=True)}", "Server: toolpipe-local"]
    head += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def _json_response(status: int, body: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    if status >= 400:
        # The API's `ErrorBody`, as the stack's gateway responses also answer API Gateway's own
        # errors (infra/cdk/constructs/api.py): a client reads every error one way.
        body = {"statusCode": status, **body}
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
        app: The app as the server follows it (`app_reload.py`): its version, and why it cannot
            be loaded; a run asked for meanwhile is refused with that reason.
        starter: For a server a command started for its own use (`--for-client`), what that
            command's requests carry in `STARTER_HEADER`: it alone may release the server
            (`POST /_local/release`); for any other client, and on any other server, the route
            does not exist.
    """

    def __init__(
        self,
        runtime: "LocalRuntime",
        host: str = "127.0.0.1",
        port: int = 0,
        health: dict[str, Any] | None = None,
        app: "AppState | None" = None,
        starter: str | None = None,
    ) -> None:
        self.runtime = runtime
        self.api = ApiFunction()
        self.changes = RunChanges()
        self.draining = threading.Event()
        self.released = threading.Event()
        self._starter = starter or None  # an empty token is none
        self._last_other = -math.inf  # when a request not the starter's was last in progress
        self._health = health or {}
        self._app = app
        self._active = 0
        self._others = 0
        self._last_activity = time.monotonic()
        self._state = threading.Condition()
        self._connections: set[socket.socket] = set()
        self._saved_api_url: str | None = None
        self._http = _Listener((host, port), self._handler_class())
        self._http.daemon_threads = True
        self._thread = threading.Thread(
            target=self._http.serve_forever, args=(stopping.POLL_SECONDS,), name="local-api", daemon=True
        )

    @property
    def url(self) -> str:
        return http_url(self._http.server_address)

    @property
    def api_url(self) -> str:
        return f"{self.url}/{STAGE}"

    def __enter__(self) -> "LocalServer":
        _link_bases.enter(self.api_url)
        listen(self.changes)
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
        stopping.stop(self._http, self._thread)
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
        stop_listening(self.changes)

    def from_starter(self, headers: "Iterable[tuple[str, str]]") -> bool:
        """Whether a request with `headers` is from the command that started this server."""
        starter = self._starter
        return starter is not None and any(
            name.lower() == STARTER_HEADER.lower() and hmac.compare_digest(value.encode(), starter.encode())
            for name, value in headers
        )

    def others_idle_seconds(self) -> float:
        """How long no client but the starter has had a request in progress (0 while one does)."""
        with self._state:
            return 0.0 if self._others else time.monotonic() - self._last_other

    @contextlib.contextmanager
    def _request(self, from_starter: bool = False) -> Iterator[None]:
        with self._state:
            self._active += 1
            self._others += 0 if from_starter else 1
        try:
            yield
        finally:
            with self._state:
                self._active -= 1
                self._last_activity = time.monotonic()
                if not from_starter:
                    self._others -= 1
                    self._last_other = self._last_activity
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
            return _json_response(200, {"status": "ok", **self._health, **self._app_health()})
        if path == RELEASE_PATH and self.from_starter(headers):
            if method != "POST":
                status, answer_headers, data = _json_response(
                    405, {"message": f"{method} not allowed: POST {RELEASE_PATH}"}
                )
                return status, [*answer_headers, ("Allow", "POST")], data
            self.released.set()
            return _json_response(200, {"released": True})
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
        if method == "POST" and matched[0] == "/runs" and self._app is not None and self._app.error:
            # Your own server: what is wrong with your code, not an opaque internal error (and not
            # 503, which clients take for a server stopping and send again). Nothing written.
            return _json_response(500, {"message": self._app.error})
        response = self.api(
            proxy_event(method, path, query, forwarded(headers), body, request_caller(headers))
        )
        return map_response(response)

    def _app_health(self) -> dict[str, Any]:
        if self._app is None:
            return {}
        return {"app_version": self._app.version, "app_error": self._app.error}

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
                with server._request(server.from_starter(self.headers.items())):
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
                server.stream_events(
                    run_id, request_caller(headers), after, timeout, self.wfile.write, self._send, self._gone
                )

            def _gone(self) -> bool:
                # A client that closed its end (Ctrl-C on `toolpipe run`) makes its socket
                # readable at end of file: noticed now, not at the next keep-alive's write,
                # so a server waiting for its last client to go stops soon after.
                try:
                    readable, _, _ = select.select([self.connection], [], [], 0)
                    return bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)
                except (OSError, ValueError):
                    return True

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
        self,
        run_id: str,
        caller: str | None,
        after: int,
        timeout: float,
        write: Any,
        send: Any,
        gone: "Callable[[], bool]" = lambda: False,
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
                    write(sse_event("item", item, event_id=int(item["seq"])))
                    published = int(item["seq"])
                    last = item
                waiting = len(ready) < len(items) or (last is not None and bool(last.get("tool_calls")))
                if not ended and waiting:
                    # Results are awaited: some call may wait for a person. Told once each.
                    for approval in self._pending_approvals(run_id, caller):
                        if approval["approval_id"] not in announced:
                            announced.add(approval["approval_id"])
                            write(sse_event("approval", approval))
                if ended:
                    write(sse_event("end", {"status": record["status"], "run": record}))
                    return
                wait = max(0.0, min(KEEPALIVE_SECONDS, deadline - time.monotonic()))
                changed = self._changed(run_id, seen, wait, gone)
                if gone():
                    return
                if self.changes.closed:
                    write(sse_event("error", {"message": "the local server is shutting down"}))
                    return
                if not changed:
                    if time.monotonic() >= deadline:
                        write(sse_event("timeout", {"status": record["status"], "after_seconds": timeout}))
                        return
                    write(b": keep-alive\n\n")
                seen = self.changes.version(run_id)
                status, body = self.api.get(f"/runs/{urllib.parse.quote(run_id)}", caller)
                if status != 200:
                    write(sse_event("error", body if isinstance(body, dict) else {"message": str(body)}))
                    return

    def _changed(self, run_id: str, seen: int, wait: float, gone: "Callable[[], bool]") -> bool:
        """Wait up to `wait` for the run to change after `seen`, looking for the client's going
        away every so often."""
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            if self.changes.wait(run_id, seen, min(left, GONE_CHECK_SECONDS)):
                return True
            if left <= GONE_CHECK_SECONDS or self.changes.closed or gone():
                return False

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
