"""The runs API a command talks to, as one `Session` port: the local server (`LocalSession`) or
a deployed stack's API (`infra/cli/remote.py`), and the reads of a run several commands print."""

import argparse
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, TextIO

from toolpipe.infra.cli import discovery
from toolpipe.infra.cli.errors import EXIT_USAGE, CommandError, reason, refused
from toolpipe.infra.cli.model_endpoint import fingerprint, spoken, unasking
from toolpipe.infra.local.client import IDEMPOTENCY_KEY, STAGE, ServerBusyError, ServerError

# How many times a session finds its server again, for a request or a broken event stream.
ATTEMPTS = 5


def keyed() -> dict[str, str]:
    """A fresh `Idempotency-Key` for one command's POST: sent again with it after a lost answer,
    the API answers with what the first did (the run it started), never a second run."""
    return {IDEMPOTENCY_KEY: f"cli-{uuid.uuid4()}"}


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

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """One API request, `path` relative to the stage (`/runs/…`): (status, parsed body).
        A request with an `Idempotency-Key` header may be sent again after a lost answer."""
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

    A session that asks for a model (`model`: `wanted_model`'s answer) uses a server asked for
    the same one. Another one a command started for itself is waited for (it stops once idle)
    and replaced; one a person started is refused, naming both models.
    """

    ATTEMPTS = ATTEMPTS
    # How long to wait for a server another command started, asked for another model, to stop:
    # it stops a second after its last request once no run is running.
    MODEL_SWITCH_SECONDS = 30.0

    def __init__(
        self,
        home: Path,
        env: dict[str, str] | None = None,
        model: str | None = None,
        err: TextIO | None = None,
    ) -> None:
        self._home = home
        self._env = env
        self._model = model
        self._err = err
        self._connect = discovery.connect  # read at start: a test replaces it
        self._started: list[Any] = []  # every server this session started, to wait for at the end
        self._connection = self._connect_for_model()
        self._remember()

    def _remember(self) -> None:
        if self._connection.child is not None:
            self._started.append(self._connection)

    def _connect_for_model(self) -> discovery.Connection:
        """The folder's server, once it is one asked for this session's model (if it asks)."""
        deadline = time.monotonic() + self.MODEL_SWITCH_SECONDS
        told = False
        while True:
            connection = self._connect(self._home, env=self._env)
            health = self._other_model_health(connection)
            if health is None:
                return connection
            busy = time.monotonic() >= deadline
            if busy or (health and not health.get("auto")):
                raise self._other_model(connection.info.url, health, busy)
            if health and not told:
                told = self._tell_waiting(connection.info.url, health)
            # Never asking it anything meanwhile: a request would keep it from going idle.
            discovery.wait_stopping(self._home, connection.info.pid, deadline)

    def _other_model_health(self, connection: discovery.Connection) -> dict[str, Any] | None:
        """None if the server will do; else its health ({} while it does not answer it)."""
        if self._model is None or connection.child is not None:
            return None  # any model will do, or it was started with this session's
        status, health = connection.client.health()
        if status != 200 or not isinstance(health, dict):
            return {}  # stopping: asked again once it is gone
        return None if health.get("model_wanted") == fingerprint(self._model) else health

    def _tell_waiting(self, url: str, health: dict[str, Any]) -> bool:
        assert self._model is not None
        if self._err is not None:
            self._err.write(
                f"toolpipe: waiting for the server at {url} (another command's, with "
                f"{health.get('model_endpoint')}) to stop, to start one with {spoken(self._model)}\n"
            )
            self._err.flush()
        return True

    def _other_model(self, url: str, health: dict[str, Any], busy: bool) -> CommandError:
        assert self._model is not None
        using = health.get("model_endpoint") or "a model it does not name"
        advice = (
            f"it is another command's, still busy after {self.MODEL_SWITCH_SECONDS:g} s: try again once it stops"
            if busy
            else "stop it"
        )
        return CommandError(
            f"the server at {url} uses {using}; you asked for {spoken(self._model)}: "
            f"{advice} or {unasking(self._model)}",
            EXIT_USAGE,
        )

    @property
    def url(self) -> str:
        return self._connection.info.url

    @property
    def started_server(self) -> bool:
        return self._connection.child is not None

    def reconnect(self) -> None:
        self._connection = self._connect_for_model()
        self._remember()

    def health(self) -> dict[str, Any]:
        status, body = self._connection.client.health()
        return body if status == 200 and isinstance(body, dict) else {}

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        # A GET may be sent again, and so may a request with an Idempotency-Key (the server
        # answers a repeat with what the first did); anything else only when the server certainly
        # did nothing (refused the connection, or answered 503): a POST whose answer was lost may
        # have started a run.
        keyed = method == "GET" or IDEMPOTENCY_KEY in (headers or {})
        retried = ServerError if keyed else ServerBusyError
        for attempt in range(self.ATTEMPTS):
            try:
                return self._connection.client.request(method, path, body, headers)
            except retried:
                if attempt == self.ATTEMPTS - 1:
                    raise
                self.reconnect()
        raise AssertionError("unreachable")

    def events(self, run_id: str, *, after: int, timeout: float) -> Iterator[tuple[str, Any]]:
        return self._connection.client.events(run_id, after=after, timeout=timeout)

    def close(self) -> None:
        for connection in self._started:  # each told first: they stop side by side
            connection.release()
        for connection in self._started:
            connection.close()


def open_session(
    args: argparse.Namespace,
    env: dict[str, str] | None = None,
    model: str | None = None,
    err: TextIO | None = None,
) -> Session:
    """The deployed API named by `--api` (or TOOLPIPE_API_URL), else the local server (one asked
    for `model`, when given; why it waits for one, on `err`)."""
    if args.api:
        from toolpipe.infra.cli.remote import RemoteSession

        return RemoteSession(args.api, args.api_key)
    return LocalSession(discovery.state_dir(), env, model, err)


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
