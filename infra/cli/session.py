"""The runs API a command talks to, as one `Session` port: the local server (`LocalSession`) or
a deployed stack's API (`infra/cli/remote.py`), and the reads of a run several commands print."""

import argparse
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from toolpipe.infra.cli import discovery
from toolpipe.infra.cli.errors import CommandError, reason, refused
from toolpipe.infra.local.client import STAGE, ServerBusyError, ServerError

# How many times a session finds its server again, for a request or a broken event stream.
ATTEMPTS = 5


class Session(Protocol):
    """What a command uses of the runs API it talks to."""

    @property
    def url(self) -> str:
        """Where the API answers, as an error message names it."""
        ...

    @property
    def started_server(self) -> bool:
        """Whether this command started the server it talks to (so it runs with its settings)."""
        ...

    def health(self) -> dict[str, Any]:
        """What the server says of itself (`model`, `app`, `model_endpoint`); {} if nothing."""
        ...

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One API request, `path` relative to the stage (`/runs/…`): (status, parsed body)."""
        ...

    def events(self, run_id: str, *, after: int, timeout: float) -> Iterator[tuple[str, Any]]:
        """The run's events after history item `after`, as (event, data) pairs."""
        ...

    def reconnect(self) -> None:
        """Find the server again (the one that was may have stopped)."""
        ...

    def close(self) -> None:
        """Let go of the session: wait for a server it started to stop once idle."""
        ...


class LocalSession:
    """The local server for the state folder, found or started, found again if it goes away.

    A server started for another client's duration stops once idle, and refuses new runs while
    it stops (nothing written): a request that finds it gone or stopping goes to the next one,
    which reads the state the last one saved.
    """

    ATTEMPTS = ATTEMPTS

    def __init__(self, home: Path, env: dict[str, str] | None = None) -> None:
        self._home = home
        self._env = env
        self._connect = discovery.connect  # read at start: a test replaces it
        self._connection = self._connect(home, env=env)
        self._started: list[Any] = []  # every server this session started, to wait for at the end
        self._remember()

    def _remember(self) -> None:
        if self._connection.child is not None:
            self._started.append(self._connection)

    @property
    def url(self) -> str:
        return self._connection.info.url

    @property
    def started_server(self) -> bool:
        return self._connection.child is not None

    def reconnect(self) -> None:
        self._connection = self._connect(self._home, env=self._env)
        self._remember()

    def health(self) -> dict[str, Any]:
        status, body = self._connection.client.health()
        return body if status == 200 and isinstance(body, dict) else {}

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        # A GET may be sent again; anything else only when the server certainly did nothing
        # (refused the connection, or answered 503): a POST that timed out may have started a run.
        retried = ServerError if method == "GET" else ServerBusyError
        for attempt in range(self.ATTEMPTS):
            try:
                return self._connection.client.request(method, path, body)
            except retried:
                if attempt == self.ATTEMPTS - 1:
                    raise
                self.reconnect()
        raise AssertionError("unreachable")

    def events(self, run_id: str, *, after: int, timeout: float) -> Iterator[tuple[str, Any]]:
        return self._connection.client.events(run_id, after=after, timeout=timeout)

    def close(self) -> None:
        for connection in self._started:
            connection.close()


def open_session(args: argparse.Namespace, env: dict[str, str] | None = None) -> Session:
    """The deployed API named by `--api` (or TOOLPIPE_API_URL), else the local server."""
    if args.api:
        from toolpipe.infra.cli.remote import RemoteSession

        return RemoteSession(args.api, args.api_key)
    return LocalSession(discovery.state_dir(), env)


def messages(session: Session, run_id: str, after: int = 0) -> list[dict[str, Any]]:
    """Every history item after seq `after`, page by page (long contents are previews)."""
    items: list[dict[str, Any]] = []
    page: str | None = f"/runs/{run_id}/messages?after={after}"
    while page:
        status, body = session.request("GET", page)
        if status != 200:
            raise refused(status, body)
        items.extend(body["messages"])
        page = body["next"]
    return items


def run_view(session: Session, run_id: str) -> dict[str, Any]:
    """`GET /runs/{id}` with every execution and history item: what `show --json` prints."""
    status, body = session.request("GET", f"/runs/{run_id}")
    if status != 200:
        raise refused(status, body) if status != 404 else CommandError(reason(body))
    executions = list(body["executions"])
    while body["executions_next"]:
        _, body = session.request("GET", body["executions_next"])
        executions.extend(body["executions"])
    return {**body, "executions": executions, "messages": messages(session, run_id)}


def page_url(session: Session, run_id: str) -> str | None:
    """The run's timeline page where it stays served after this command: the running local
    server's (not one this command started, which stops with it), or the deployed API's (there
    behind its authorization, as every route)."""
    from toolpipe.infra.cli.offline import OfflineSession

    if isinstance(session, OfflineSession):
        return None  # a stopped folder read offline: no server serves the page
    quoted = urllib.parse.quote(run_id, safe="")
    if isinstance(session, LocalSession):
        return None if session.started_server else f"{session.url}/{STAGE}/ui/runs/{quoted}"
    return f"{session.url.rstrip('/')}/ui/runs/{quoted}"
