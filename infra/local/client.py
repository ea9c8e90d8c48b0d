"""Find the local server for a state folder, start one if there is none, and talk to it over HTTP.

Standard library only: a `toolpipe run` or `toolpipe show` that finds a server running never
imports boto3, moto or the handlers, so twenty of them at once start in a blink.

The state folder (`TOOLPIPE_HOME`, default `.toolpipe`) holds two files for discovery:
- `server.lock`: the server holds an exclusive `fcntl.flock` on it for its whole life, state
  saved included. The lock is the truth (the kernel drops it when the process dies, however it
  dies); a second server for the same folder cannot take it and exits 2.
- `server.json`: `{"url", "pid", "started", "aws_endpoint"}`, written atomically once the server
  answers and removed when it starts to shut down. `aws_endpoint` is where the server answers the
  AWS APIs it emulates (`endpoint_url` for boto3, `--endpoint-url` for the aws CLI). Only an address: a file whose pid is dead or whose
  server does not answer is stale and ignored (the next server replaces it).
"""

import contextlib
import errno
import fcntl
import http.client
import json
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

STAGE = "v1"  # the stage the deployed REST API is served under (infra/stack.py)
CALLER_HEADER = "X-Toolpipe-Caller"  # local only: who the request is from (an IAM ARN); "" for no one
HEALTH_PATH = "/_local/health"  # local only, outside the stage: the deployed API has no such route
SERVER_FILE = "server.json"
LOCK_FILE = "server.lock"
LOG_FILE = "toolpipe.log"  # the server's output and every CLI process's logs (infra/local/logfile.py)
# A server started for a client's own duration stops this long after its last request ends
# (and no run is running): long enough for `toolpipe run` then `toolpipe show` to share it.
AUTO_IDLE_SECONDS = 1.0
START_TIMEOUT_SECONDS = 60.0  # the runtime starts in ~2-4 s here; a loaded CI machine is slower
# The deployed API has no event stream: a client of it reads new history items this often.
POLL_SECONDS = 1.0

# Signs one request: (method, absolute URL, headers, body) -> headers to add (SigV4, an API key).
Auth = Callable[[str, str, dict[str, str], bytes | None], dict[str, str]]


class ServerError(Exception):
    """The local server could not be found, started or reached; the message is one line."""


class ServerBusyError(ServerError):
    """The server refused the request because it is shutting down: nothing was done, try again."""


@dataclass(frozen=True)
class ServerInfo:
    """What `server.json` says about a running server."""

    url: str
    pid: int
    started: str
    aws_endpoint: str | None = None


def http_url(address: tuple[Any, ...]) -> str:
    """The URL of a server bound to `address` (host, port, ...); an IPv6 host in brackets."""
    host, port = str(address[0]), address[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def server_file(home: Path) -> Path:
    return home / SERVER_FILE


def lock_file(home: Path) -> Path:
    return home / LOCK_FILE


def try_lock(home: Path) -> int | None:
    """The folder's server lock as an open descriptor, or None when another process holds it."""
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file(home), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


def lock_is_held(home: Path) -> bool:
    fd = try_lock(home)
    if fd is None:
        return True
    os.close(fd)  # closing the descriptor releases the lock
    return False


def write_server_file(home: Path, info: ServerInfo) -> None:
    # Atomic: a client reads either no file or a whole one, never half of it.
    tmp = home / f"{SERVER_FILE}.{os.getpid()}.tmp"
    fields = {"url": info.url, "pid": info.pid, "started": info.started, "aws_endpoint": info.aws_endpoint}
    tmp.write_text(json.dumps(fields))
    tmp.replace(server_file(home))


def remove_server_file(home: Path, pid: int) -> None:
    """Remove `server.json` if it is this server's (a newer server's file is left alone)."""
    info = read_server_file(home)
    if info is not None and info.pid == pid:
        with contextlib.suppress(FileNotFoundError):
            server_file(home).unlink()


def read_server_file(home: Path) -> ServerInfo | None:
    try:
        data = json.loads(server_file(home).read_text())
        aws = data.get("aws_endpoint")
        return ServerInfo(
            url=str(data["url"]),
            pid=int(data["pid"]),
            started=str(data["started"]),
            aws_endpoint=None if aws is None else str(aws),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, or not ours to read: treated as no server


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def discover(home: Path) -> ServerInfo | None:
    """The server serving `home`, if `server.json` names one that is alive and answers as itself."""
    info = read_server_file(home)
    if info is None or not _alive(info.pid):
        return None
    try:
        status, body = Client(info.url, timeout=5.0).health()
    except ServerError:
        return None
    if status != 200 or not isinstance(body, dict) or body.get("pid") != info.pid:
        return None  # a reused port or pid: not the server the file names
    return info


class Client:
    """The runs API over HTTP: a local server's (plus its local-only routes), or a deployed one's.

    `url` is the server's root; requests go under `base_path` (the stage, `/v1`). Against a
    deployed API (`Client.for_api`), `auth` signs each request and the events of a run are
    read by polling, since only the local server streams them.
    """

    def __init__(
        self,
        url: str,
        *,
        caller: str | None = None,
        timeout: float = 60.0,
        base_path: str = f"/{STAGE}",
        auth: Auth | None = None,
        streams: bool = True,
    ) -> None:
        self.url = url.rstrip("/")
        parts = urllib.parse.urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._https else 80)
        self._base_path = base_path.rstrip("/")
        self._caller = caller
        self._timeout = timeout
        self._auth = auth
        self._streams = streams
        self._what = "the local server" if streams else "the API"

    @classmethod
    def for_api(cls, api_url: str, auth: Auth | None, *, timeout: float = 60.0) -> "Client":
        """A deployed runs API at its stage URL (the stack's `ApiUrl`: `https://…/v1/`)."""
        parts = urllib.parse.urlsplit(api_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServerError(f"not an API URL (https://…/v1): {api_url!r}")
        root = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        return cls(root, timeout=timeout, base_path=parts.path, auth=auth, streams=False)

    def _connection(self, timeout: float | None = None) -> http.client.HTTPConnection:
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return kind(self._host, self._port, timeout=timeout or self._timeout)

    def _headers(
        self, method: str, path: str, body: bytes | None, extra: dict[str, str] | None = None
    ) -> dict[str, str]:
        headers = {"Accept": "application/json", **(extra or {})}
        if self._caller is not None:
            headers[CALLER_HEADER] = self._caller
        if self._auth is not None:
            # Last: a signature covers the headers as they are sent.
            headers.update(self._auth(method, f"{self.url}{path}", dict(headers), body))
        return headers

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One API request; `path` is relative to the stage (`/runs/…`), as the API's links are."""
        return self._send(method, f"{self._base_path}{path}", body)

    def health(self) -> tuple[int, Any]:
        return self._send("GET", HEALTH_PATH, None)

    def _send(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        payload = None if body is None else json.dumps(body).encode()
        headers = self._headers(
            method, path, payload, {"Content-Type": "application/json"} if payload is not None else None
        )
        connection = self._connection()
        try:
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except ConnectionRefusedError as e:
            raise ServerBusyError(f"{self._what} at {self.url} is not answering") from e
        except (OSError, http.client.HTTPException) as e:
            raise ServerError(f"lost {self._what} at {self.url}: {type(e).__name__}: {e}") from e
        finally:
            connection.close()
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = data.decode(errors="replace")
        if response.status == 503 and self._streams:
            raise ServerBusyError(f"the local server at {self.url} is shutting down")
        return response.status, parsed

    def events(self, run_id: str, *, after: int = 0, timeout: float = 300.0) -> Iterator[tuple[str, Any]]:
        """The run's server-sent events as (event, data) pairs, until the server ends the stream.

        Raises:
            ServerError: the stream could not be opened, or broke before the server ended it.
        """
        if not self._streams:
            yield from self._poll_events(run_id, after=after, timeout=timeout)
            return
        query = urllib.parse.urlencode({"timeout": f"{timeout:g}"})
        # The read timeout outlasts the server's keep-alive comments (every few seconds).
        connection = self._connection(timeout=60.0)
        path = f"{self._base_path}/runs/{urllib.parse.quote(run_id)}/events?{query}"
        try:
            connection.request(
                "GET",
                path,
                headers=self._headers(
                    "GET", path, None, {"Accept": "text/event-stream", "Last-Event-ID": str(after)}
                ),
            )
            response = connection.getresponse()
            if response.status != 200:
                data = response.read()
                try:
                    message = json.loads(data).get("message", data.decode())
                except (ValueError, AttributeError):
                    message = data.decode(errors="replace")
                if response.status == 503:
                    raise ServerBusyError(message)
                raise ServerError(str(message))
            yield from _parse_events(response)
        except ConnectionRefusedError as e:
            raise ServerBusyError(f"the local server at {self.url} is not answering") from e
        except (OSError, http.client.HTTPException) as e:
            raise ServerError(f"lost the local server at {self.url}: {type(e).__name__}: {e}") from e
        finally:
            connection.close()

    def _poll_events(self, run_id: str, *, after: int, timeout: float) -> Iterator[tuple[str, Any]]:
        """The same events as the local stream, read from the deployed API's routes: each new
        history item once, in order, each call that waits for approval once, then `end` with the
        run record (or `timeout`)."""
        deadline = time.monotonic() + timeout
        run_path = f"/runs/{urllib.parse.quote(run_id)}"
        announced: set[str] = set()
        while True:
            # The record first: items written before it ended are all in the page read next.
            record = self._get(run_path)["run"]
            page: str | None = f"{run_path}/messages?after={after}"
            while page:
                listed = self._get(page)
                for item in listed["messages"]:
                    after = int(item["seq"])
                    yield "item", item
                page = listed["next"]
            if record["status"] != "running":
                yield "end", {"run": record}
                return
            # Calls of this run that wait for a person, each told once (as the local stream does).
            for approval in self._get("/approvals?status=pending")["approvals"]:
                if approval["run_id"] == run_id and approval["approval_id"] not in announced:
                    announced.add(approval["approval_id"])
                    yield "approval", approval
            if time.monotonic() + POLL_SECONDS > deadline:
                yield "timeout", {}
                return
            time.sleep(POLL_SECONDS)

    def _get(self, path: str) -> Any:
        status, body = self.request("GET", path)
        if status != 200:
            message = body.get("message", body) if isinstance(body, dict) else body
            raise ServerError(f"{self._what} answered {status}: {message}")
        return body


def _parse_events(stream: IO[bytes]) -> Iterator[tuple[str, Any]]:
    """Server-sent events (the `text/event-stream` format), one (event, data) per blank line."""
    event, data = "message", list[str]()
    for raw in stream:
        line = raw.decode().rstrip("\r\n")
        if not line:
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", list[str]()
        elif line.startswith(":"):
            continue  # a keep-alive comment
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)


@dataclass
class Connection:
    """A client of a server that was found, or started for this client's own use (`child`)."""

    client: Client
    info: ServerInfo
    child: subprocess.Popen[bytes] | None = None

    def close(self, wait: float = 10.0) -> None:
        """Let a server this client started finish: it stops on its own once idle.

        Other clients may still be using it: then it is left running, and stops after them.
        """
        if self.child is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.child.wait(timeout=wait)


def connect(
    home: Path,
    *,
    caller: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = START_TIMEOUT_SECONDS,
) -> Connection:
    """The server for `home`: the running one, or a new one started for this client's duration.

    Concurrent clients that find no server race to start one; the folder's lock lets exactly one
    win, and the others use it. A server that is shutting down still holds the lock until its
    state is saved: clients wait for it to go, then start a new one, which reads that state.

    Raises:
        ServerError: no server could be started or found within `timeout`.
    """
    deadline = time.monotonic() + timeout
    child: subprocess.Popen[bytes] | None = None
    while True:
        info = discover(home)
        if info is not None:
            mine = child if child is not None and child.pid == info.pid else None
            return Connection(Client(info.url, caller=caller), info, mine)
        if child is not None and child.poll() is not None:
            # Lost the race for the lock (exit 2): another client's server is starting.
            if child.returncode != 2:
                raise ServerError(
                    f"the local server exited with {child.returncode} while starting; see {home / LOG_FILE}"
                )
            child = None
        if child is None and not lock_is_held(home):
            child = _start_child(home, env)
        if time.monotonic() > deadline:
            if child is not None:
                child.terminate()
            raise ServerError(
                f"no local server answered for {home} within {timeout:g} s; see {home / LOG_FILE}"
            )
        # Waiting for another process's server to write server.json (or to release the lock).
        time.sleep(0.02)


def _start_child(home: Path, env: dict[str, str] | None) -> subprocess.Popen[bytes]:
    home.mkdir(parents=True, exist_ok=True)
    log = (home / LOG_FILE).open("ab")
    try:
        # Its own session: a Ctrl-C meant for this client must not stop a server other clients
        # share. Output goes to a file: a pipe nobody reads any more would block or kill it.
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "toolpipe.infra.cli",
                "serve",
                "--port",
                "0",
                "--idle-exit",
                f"{AUTO_IDLE_SECONDS:g}",
            ],
            env={**os.environ, **(env or {}), "TOOLPIPE_HOME": str(home)},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    finally:
        log.close()
