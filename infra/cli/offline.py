"""The read-only commands (`show`, `approvals`) on a stopped state folder: its saved state read
in this process, with no server started and no moto loaded (a server takes seconds to boot).

`open_reading_session` picks where a read goes: `--api` to the deployed API; a folder a server
serves (or is starting or stopping for) to that server, which has the live state; a stopped
folder whose snapshot is whole to an `OfflineSession`; a folder whose journal holds a crash's
requests to a server started as before, which replays them and compacts (`snapshot.py`).

An `OfflineSession` answers the GET routes those commands send as the API does, through the
API's own readers (`RunReader`, `DynamoApprovalStore`) over the snapshot (`infra/local/snapshot.py`
says why that shape), as the local caller the server would see, with the API function's
settings (admin principal, prices) read from the same template the server runs. What only a
running server can give is left out rather than made up: an approval's `callback_url` (no server
serves the page) and the timeline page; a stored answer's `output_url` names its object
(`s3://…`) instead of a presigned URL of an endpoint that is not running.
"""

import argparse
import re
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolpipe.infra.cli import discovery
from toolpipe.infra.cli.errors import CommandError
from toolpipe.infra.cli.parser import name_app
from toolpipe.infra.cli.session import LocalSession, Session
from toolpipe.infra.local.client import LOCAL_CALLER
from toolpipe.infra.local.snapshot import Snapshot, SnapshotError, journal_pending, snapshot_path

if TYPE_CHECKING:
    from toolpipe.shared.deferred.models import WaitingFor

# The content bucket as the stores here name it: the snapshot's `objects` are that bucket's.
CONTENT_BUCKET = "toolpipe-local-contents"
TABLE = "toolpipe-local"
# The routes an OfflineSession answers (the GETs `show` and `approvals` send).
_RUN = re.compile(r"/runs/(?P<run_id>[^/]+)")
_MESSAGES = re.compile(r"/runs/(?P<run_id>[^/]+)/messages")
_APPROVALS = "/approvals"


def open_reading_session(args: argparse.Namespace) -> Session:
    """Where a read-only command reads: see the module's docstring."""
    if args.api:
        from toolpipe.infra.cli.remote import RemoteSession

        return RemoteSession(args.api, args.api_key)
    home = discovery.state_dir()
    if not home.is_dir():
        raise CommandError(f"no runs here: no state folder {home}{_what_to_do(args)}")
    if _stopped(home):
        snapshot = _whole_snapshot(home)
        if snapshot is not None:
            return OfflineSession(home, snapshot)
    # A server it may start runs the app: named now (`name_the_app` left it for this case).
    name_app(args.app)
    return LocalSession(home)


def _what_to_do(args: argparse.Namespace) -> str:
    """The advice after "no state folder": a run makes one, but only where an app is named
    (outside a project `toolpipe run` fails too: no agents)."""
    from toolpipe.shared.app_ref import find_app

    if args.app or find_app() is not None:
        return " (run `toolpipe run` first)"
    return (
        f", and {Path.cwd()} is in no project (no pyproject.toml with [tool.toolpipe] there or "
        "above): run this from your project's folder, or set TOOLPIPE_HOME to its state folder "
        "(`toolpipe init DIR` makes a project)"
    )


def _stopped(home: Path) -> bool:
    """Whether no server serves `home`. A server that holds the folder's lock without answering
    is starting (it answers soon) or stopping (it lets go once its state is saved): the one that
    stops is waited for, not replaced by a new one booted to read what it just saved."""
    deadline = time.monotonic() + discovery.START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if discovery.discover(home) is not None:
            return False
        if not discovery.lock_is_held(home):
            return True
        time.sleep(0.02)
    return False  # the server's own session says what became of it


def _whole_snapshot(home: Path) -> Snapshot | None:
    """The folder's saved state when it is the whole state; None when only a server may read it."""
    try:
        snapshot = Snapshot.load(snapshot_path(home))
    except FileNotFoundError:
        # A server saves a snapshot as it starts (persistence.py, `open`): none ever served here.
        raise CommandError(f"no runs here: {home} holds no saved state") from None
    except SnapshotError as e:
        raise CommandError(f"cannot read the saved state: {e}") from None
    if journal_pending(home, snapshot.generation):
        # A crash left requests in the journal that the snapshot does not hold: a server
        # replays them and compacts (infra/local/persistence.py), and then serves the read.
        return None
    return snapshot


class OfflineSession:
    """The runs API's read routes over a stopped folder's snapshot (see the module docstring)."""

    def __init__(self, home: Path, snapshot: Snapshot) -> None:
        from toolpipe.infra.local import template
        from toolpipe.shared.costs.prices import PriceTable
        from toolpipe.shared.history.store import DynamoHistoryStore
        from toolpipe.shared.runs.report import PAGE_LIMIT, RunReader
        from toolpipe.shared.settings import ApiSettings

        self._home = home
        environment = _api_environment(template.load(template.configured_path()))
        self._admin = ApiSettings.from_env(environment).admin_principal
        # The reads of a boto3 Table and S3 client that the stores make.
        table: Any = snapshot.table(TABLE)
        objects: Any = snapshot.bucket(CONTENT_BUCKET)
        store = DynamoHistoryStore(table, objects, CONTENT_BUCKET)
        self._page_limit = PAGE_LIMIT
        self._reader = RunReader(
            store, _object_uri, self._admin, PriceTable.from_env(environment), waits=self._waiting_for
        )
        self._table = table

    @property
    def url(self) -> str:
        return f"the saved state in {self._home}"

    @property
    def started_server(self) -> bool:
        return False

    def health(self) -> dict[str, Any]:
        return {}

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        from toolpipe.shared.history.errors import RunNotFoundError

        parts = urllib.parse.urlsplit(path)
        query = dict(urllib.parse.parse_qsl(parts.query))
        route = self._route(method, parts.path, query)
        try:
            return 200, route()
        except RunNotFoundError as e:
            return 404, {"statusCode": 404, "message": str(e)}  # as the API words it (errors.STATUSES)

    def _route(self, method: str, path: str, query: dict[str, str]) -> Callable[[], Any]:
        caller = LOCAL_CALLER  # what the server sees of every CLI request (no caller header)
        if method == "GET" and (match := _MESSAGES.fullmatch(path)):
            run_id = match["run_id"]
            after, limit = int(query.get("after", 0)), int(query.get("limit", self._page_limit))
            return lambda: self._reader.messages(run_id, caller, after, limit)
        if method == "GET" and (match := _RUN.fullmatch(path)):
            run_id = match["run_id"]
            return lambda: self._reader.run(run_id, caller, int(query.get("executions_after", 0)))
        if method == "GET" and path == _APPROVALS:
            return lambda: self._list_approvals(caller, query.get("status"))
        raise CommandError(f"{method} {path} needs a running server: start one with `toolpipe serve`")

    def _list_approvals(self, caller: str, status: str | None) -> dict[str, Any]:
        # Here, not with the run reader: `show` need not load the approvals' modules.
        from toolpipe.shared.deferred.bodies import ApprovalView
        from toolpipe.shared.deferred.models import ApprovalStatus
        from toolpipe.shared.deferred.store import DynamoApprovalStore

        # As `DeferredCalls.list`: the admin principal's listing holds everyone's.
        wanted = None if status is None else ApprovalStatus(status)
        listed = DynamoApprovalStore(self._table).list(None if caller == self._admin else caller, wanted)
        # As the API shows them (`approvals.with_link`), without the link no server signed.
        return {"approvals": [ApprovalView.of(a, None).model_dump(mode="json") for a in listed]}

    def _waiting_for(self, run_id: str) -> "WaitingFor | None":
        """Who a running run waits for, as the API says (`ApiServices.reader`)."""
        from toolpipe.shared.deferred.models import waiting_for
        from toolpipe.shared.deferred.store import DynamoApprovalStore

        return waiting_for(DynamoApprovalStore(self._table).waiting(run_id))

    def events(self, run_id: str, *, after: int, timeout: float) -> Iterator[tuple[str, Any]]:
        raise CommandError("a run's events need a running server: start one with `toolpipe serve`")

    def reconnect(self) -> None:
        """Nothing to find again: the saved state does not go away."""

    def close(self) -> None:
        """Nothing to let go of: no server was started."""


def _api_environment(stack: Any) -> dict[str, str]:
    """The API function's environment as the template sets it (its plain values)."""
    from toolpipe.infra.cdk.functions import FUNCTIONS

    _, props = stack.function(FUNCTIONS["api"])
    variables = props.get("Environment", {}).get("Variables", {})
    return {name: value for name, value in variables.items() if isinstance(value, str)}


def _object_uri(key: str) -> str:
    # Where the object is, not a link: no endpoint runs to presign one for.
    return f"s3://{CONTENT_BUCKET}/{key}"
