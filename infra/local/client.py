"""The runs API over HTTP: the local server's (and its local-only routes), or a deployed stack's.

Standard library only: a `toolpipe run` or `toolpipe show` that finds a server running never
imports boto3, moto or the handlers, so twenty of them at once start in a blink. Finding or
starting the server for a state folder is the CLI's (`infra/cli/discovery.py`); the constants
here are the ones the server and its clients share.
"""

import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import http.client

STAGE = "v1"  # the stage the deployed REST API is served under (infra/cdk/stack.py)
# The API answers a request sent again with the same key with what the first did (functions/api).
IDEMPOTENCY_KEY = "Idempotency-Key"
CALLER_HEADER = "X-Toolpipe-Caller"  # local only: who the request is from (an IAM ARN); "" for no one
# The identity local requests carry without that header, as API Gateway reports an IAM user.
LOCAL_CALLER = "arn:aws:iam::000000000000:user/local"
HEALTH_PATH = "/_local/health"  # local only, outside the stage: the deployed API has no such route
RELEASE_PATH = "/_local/release"  # local only too: the command that started the server is done
RELEASE_TIMEOUT_SECONDS = 2.0
# A server a command started knows that command's requests by this header, whose value it is
# given at its start in STARTER_ENV: only that command releases it.
STARTER_HEADER = "X-Toolpipe-Starter"
STARTER_ENV = "TOOLPIPE_STARTER"
LOG_FILE = "toolpipe.log"  # the server's output and every CLI process's logs (infra/local/logfile.py)
# The deployed API has no event stream: a client of it reads new history items this often.
POLL_SECONDS = 1.0

# Signs one request: (method, absolute URL, headers, body) -> headers to add (SigV4, an API key).
Auth = Callable[[str, str, dict[str, str], bytes | None], dict[str, str]]


class ServerError(Exception):
    """The local server could not be found, started or reached; the message is one line."""


class ServerBusyError(ServerError):
    """The server refused the request because it is shutting down: nothing was done, try again."""


def http_url(address: tuple[Any, ...]) -> str:
    """The URL of a server bound to `address` (host, port, ...); an IPv6 host in brackets."""
    host, port = str(address[0]), address[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


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
        starter: str | None = None,
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
        self._starter = starter  # this client started the local server: its requests say so
        self._what = "the local server" if streams else "the API"

    @classmethod
    def for_api(cls, api_url: str, auth: Auth | None, *, timeout: float = 60.0) -> "Client":
        """A deployed runs API at its stage URL (the stack's `ApiUrl`: `https://…/v1/`)."""
        parts = urllib.parse.urlsplit(api_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServerError(f"not an API URL (https://…/v1): {api_url!r}")
        root = urllib.parse.urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        return cls(root, timeout=timeout, base_path=parts.path, auth=auth, streams=False)

    def _connection(self, timeout: float | None = None) -> "http.client.HTTPConnection":
        # Imported here: a command that reads a stopped folder (infra/cli/offline.py) sends no
        # request, and http.client (with the email parser) is a tenth of its start.
        import http.client

        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        return kind(self._host, self._port, timeout=timeout or self._timeout)

    def _headers(
        self, method: str, path: str, body: bytes | None, extra: dict[str, str] | None = None
    ) -> dict[str, str]:
        headers = {"Accept": "application/json", **(extra or {})}
        if self._caller is not None:
            headers[CALLER_HEADER] = self._caller
        if self._starter is not None:
            headers[STARTER_HEADER] = self._starter
        if self._auth is not None:
            # Last: a signature covers the headers as they are sent.
            headers.update(self._auth(method, f"{self.url}{path}", dict(headers), body))
        return headers

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """One API request; `path` is relative to the stage (`/runs/…`), as the API's links are;
        `headers` beside the client's own (an `Idempotency-Key`)."""
        return self._send(method, f"{self._base_path}{path}", body, headers)

    def health(self) -> tuple[int, Any]:
        return self._send("GET", HEALTH_PATH, None)

    def release(self) -> tuple[int, Any]:
        """Tell a local server this client started that it is done with it (it stops sooner).
        Briefly: the client waits for that server to stop anyway."""
        return self._send("POST", RELEASE_PATH, None, timeout=RELEASE_TIMEOUT_SECONDS)

    def _send(
        self,
        method: str,
        path: str,
        body: Any,
        extra: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> tuple[int, Any]:
        import http.client

        payload = None if body is None else json.dumps(body).encode()
        headers = self._headers(
            method,
            path,
            payload,
            {**(extra or {}), **({"Content-Type": "application/json"} if payload is not None else {})},
        )
        connection = self._connection(timeout)
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
        import http.client

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
