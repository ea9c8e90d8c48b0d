"""What a run did, for the runs API: the run, its tool executions and its history, in pieces
that each fit one Lambda response whatever the run holds.

A Lambda response stops at 6 MB (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html):
long strings are shown as previews with a reference to the whole item, pages stop at a
count and at a JSON size, and an item too large even alone is answered with a presigned S3
URL of its stored object.
"""

import base64
import binascii
import contextlib
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, Field

from toolpipe.shared.costs.estimate import estimate
from toolpipe.shared.costs.prices import PriceTable
from toolpipe.shared.deferred.models import WaitingFor
from toolpipe.shared.dynamo import CALLER_INDEX_PK, RUNS_OF_CALLER
from toolpipe.shared.history import HistoryStore
from toolpipe.shared.history.errors import InvalidCursorError, RunNotFoundError
from toolpipe.shared.history.ports import Cursor
from toolpipe.shared.messages import (
    HISTORY_ITEM,
    AssistantMessage,
    HistoryItem,
    RunRecord,
    RunStatus,
    ToolResult,
)
from toolpipe.shared.runs.calls import result_slot

# Strings longer than this are cut to a preview; lists and objects keep this many entries.
PREVIEW_CHARS = 1000
PREVIEW_LIST_ITEMS = 20
PREVIEW_OBJECT_KEYS = 50
# Items per page, by default and at most.
PAGE_LIMIT = 100
# JSON bytes one response may hold, with room under the 6 MB Lambda limit for the envelope.
RESPONSE_BUDGET = 5_000_000
# Runs per page of `GET /runs`, by default.
RUNS_PAGE_DEFAULT = 20
# A token is a few keys: anything much longer is not one.
MAX_TOKEN_CHARS = 4096
# A token is base64url (unpadded) of a JSON object, which starts `{"`: `eyJ`.
TOKEN_PATTERN = r"^eyJ[A-Za-z0-9_-]*$"
# Presigned URLs outlive a slow download but not a leaked log line by much.
URL_SECONDS = 900

# Turns an S3 key under runs/ into a URL a caller can GET for `URL_SECONDS`.
Presigner = Callable[[str], str]
# Who a running run waits for, by its id (`deferred.models.waiting_for` of its pending calls).
Waits = Callable[[str], WaitingFor | None]


def json_size(value: Any) -> int:
    """Bytes `value` takes in the Lambda response: serialized as the API does (compact, ASCII
    with escapes), then escaped again as the proxy response's `body` string."""
    return len(json.dumps(json.dumps(value, separators=(",", ":"))))


def shorten(value: Any, cut: dict[str, int], path: str = "") -> Any:
    """`value` with every string cut to `PREVIEW_CHARS` and every list or object to its first
    entries; `cut` gets each shortened field's dotted path and its whole length."""
    if isinstance(value, str):
        if len(value) <= PREVIEW_CHARS:
            return value
        cut[path] = len(value)
        return value[:PREVIEW_CHARS] + "…"
    if isinstance(value, list):
        if len(value) > PREVIEW_LIST_ITEMS:
            cut[path] = len(value)
        return [shorten(v, cut, _join(path, str(i))) for i, v in enumerate(value[:PREVIEW_LIST_ITEMS])]
    if isinstance(value, dict):
        if len(value) > PREVIEW_OBJECT_KEYS:
            cut[path] = len(value)
        kept = list(value.items())[:PREVIEW_OBJECT_KEYS]
        return {k: shorten(v, cut, _join(path, str(k)[:PREVIEW_CHARS])) for k, v in kept}
    return value


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def message_link(run_id: str, seq: int) -> str:
    return f"/runs/{run_id}/messages/{seq}"


def message_preview(run_id: str, item: HistoryItem) -> dict[str, Any]:
    """A history item with long fields cut; `truncated` names them, `ref` reads the whole item."""
    cut: dict[str, int] = {}
    preview: dict[str, Any] = shorten(HISTORY_ITEM.dump_python(item, mode="json"), cut)
    if cut:
        preview |= {"truncated": cut, "ref": message_link(run_id, item.seq)}
    return preview


class ToolExecution(BaseModel):
    call_id: str
    tool: str
    turn: int
    seq: int  # the history slot of the call's result: the cursor of the executions pages
    arguments: dict[str, Any] | str = Field(
        description="The arguments as an object where the model sent a short JSON object (as tools "
        "take them), else (a preview of) the text it sent: `arguments_chars` long."
    )
    arguments_chars: int
    arguments_ref: str | None = None  # the model reply holding the whole arguments, when cut
    status: str  # ok | error | pending (no result yet)
    result: str | None = None
    result_chars: int | None = None
    result_ref: str | None = None  # the history item holding the whole result
    full_result_ref: str | None = None  # S3 key of a result longer than the agent's max_result_chars
    full_result_url: str | None = None  # a presigned GET of that object
    error_type: str | None = None
    error_detail: str | None = None
    duration_ms: int | None = None
    attempts: int | None = None


def _preview_text(text: str) -> str:
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"


def tool_executions(run_id: str, history: list[HistoryItem]) -> list[ToolExecution]:
    """Every tool call of the run in call order, paired with its result; texts are previews."""
    results = {i.seq: i for i in history if isinstance(i, ToolResult)}  # a call is its slot
    report = []
    for reply in (i for i in history if isinstance(i, AssistantMessage)):
        for index, call in enumerate(reply.tool_calls):
            slot = result_slot(reply, index)
            arguments: dict[str, Any] | str = _preview_text(call.arguments)
            if len(call.arguments) <= PREVIEW_CHARS:
                with contextlib.suppress(ValueError, RecursionError):  # not JSON: shown as sent
                    parsed = json.loads(call.arguments)
                    if isinstance(parsed, dict):  # another JSON value is text, as sent
                        arguments = parsed
            long_arguments = len(call.arguments) > PREVIEW_CHARS
            entry = ToolExecution(
                call_id=call.id,
                tool=call.name,
                turn=reply.turn,
                seq=slot,
                arguments=arguments,
                arguments_chars=len(call.arguments),
                arguments_ref=message_link(run_id, reply.seq) if long_arguments else None,
                status="pending",
            )
            result = results.get(slot)
            if result is not None:
                long = len(result.content) > PREVIEW_CHARS
                entry = entry.model_copy(
                    update={
                        "status": result.status,
                        "result": _preview_text(result.content),
                        "result_chars": len(result.content),
                        "result_ref": message_link(run_id, result.seq) if long else None,
                        "error_type": result.error_type,
                        "error_detail": result.error_detail,
                        "duration_ms": result.duration_ms,
                        "attempts": result.attempts,
                        "full_result_ref": result.full_result_ref,
                    }
                )
            report.append(entry)
    return report


def readable(store: HistoryStore, run_id: str, caller: str, admin: str | None) -> RunRecord:
    """The run, if `caller` may see it: its own principal or the admin. Anyone else gets the
    same `RunNotFoundError` as for an unknown id."""
    record = store.get_run(run_id)
    if caller != record.caller and caller != admin:
        raise RunNotFoundError(run_id)
    return record


def encode_cursor(cursor: Cursor) -> str:
    """The `next` token: the store's cursor as URL-safe text, less the caller's partition (the
    listing names it: a token never carries an identity, so its length does not grow with one).
    Not signed: every store checks a cursor belongs to the listing it continues (`check_cursor`),
    which no edit can get past."""
    keys = {k: v for k, v in cursor.items() if k != CALLER_INDEX_PK}
    return base64.urlsafe_b64encode(json.dumps(keys, separators=(",", ":")).encode()).decode().rstrip("=")


def decode_cursor(token: str, owner: str | None = None) -> Cursor:
    """The store's cursor from a `next` token, in the caller index partition of `owner` (None:
    the admin's listing of every run, which has none)."""
    if len(token) > MAX_TOKEN_CHARS or not re.fullmatch(TOKEN_PATTERN, token):
        raise InvalidCursorError()
    try:
        value = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, RecursionError) as e:
        raise InvalidCursorError() from e
    if (
        not isinstance(value, dict)
        or CALLER_INDEX_PK in value
        or not all(isinstance(v, str) for v in value.values())
    ):
        raise InvalidCursorError()
    if owner is not None:
        value[CALLER_INDEX_PK] = f"{RUNS_OF_CALLER}{owner}"
    return value


class RunReader:
    """The read side of the runs API. A run is visible to the principal that started it and
    to the admin principal; to anyone else it does not exist (the same 404 as an unknown id)."""

    def __init__(
        self,
        store: HistoryStore,
        presign: Presigner,
        admin_principal: str | None = None,
        prices: PriceTable | None = None,
        waits: Waits | None = None,
    ) -> None:
        self._store = store
        self._presign = presign
        self._admin = admin_principal
        self._prices = prices or PriceTable()
        self._waits = waits

    def _waiting_for(self, run_id: str, status: RunStatus) -> WaitingFor | None:
        """Who the run waits for: only a running run waits (a pending call of an ended run is
        answered by nobody). Read from its calls' gates when asked, one query a running run, not
        kept on the record: a gate is already the one item a decision moves, so the answer cannot
        lag behind it, and no step of the run writes anything more."""
        return self._waits(run_id) if self._waits is not None and status is RunStatus.RUNNING else None

    def _readable(self, run_id: str, caller: str) -> RunRecord:
        return readable(self._store, run_id, caller, self._admin)

    def list_runs(
        self,
        caller: str,
        *,
        owner: str | None = None,
        every: bool = False,
        status: RunStatus | None = None,
        agent: str | None = None,
        limit: int = RUNS_PAGE_DEFAULT,
        token: str | None = None,
    ) -> dict[str, Any]:
        """A page of runs, newest first, and the `next` token (None on the last page). Whose:
        the caller's own; the admin may name another `owner`, or ask for `every` run.

        Raises:
            PermissionError: a caller other than the admin named another owner or every run.
            InvalidCursorError: `token` is not one this listing gave.
        """
        if (every or (owner is not None and owner != caller)) and caller != self._admin:
            raise PermissionError("only the admin principal may list other callers' runs")
        whose = None if every else owner or caller
        start = decode_cursor(token, whose) if token is not None else None
        runs, cursor = self._store.list_runs(whose, status=status, agent=agent, limit=limit, start=start)
        return {
            "runs": [
                {
                    **r.model_dump(mode="json"),
                    "links": {"self": f"/runs/{r.run_id}"},
                    "waiting_for": self._waiting_for(r.run_id, r.status),
                }
                for r in runs
            ],
            "next": encode_cursor(cursor) if cursor is not None else None,
        }

    def run(self, run_id: str, caller: str, executions_after: int = 0) -> dict[str, Any]:
        """The run record and a page of its tool executions (those whose slot is after
        `executions_after`); `executions_next` reads the next page."""
        record = self._readable(run_id, caller)
        model_usd = record.usage.cost_micro_usd / 1_000_000
        view = {
            **record.model_dump(mode="json"),
            "cost_usd": model_usd,
            "waiting_for": self._waiting_for(run_id, record.status),
        }
        cost = estimate(self._store.get_costs(run_id), self._prices, model_usd).model_dump(mode="json")
        if record.output_ref:
            view["output_url"] = self._presign(record.output_ref)
        executions = (
            e for e in tool_executions(run_id, self._store.load_history(run_id)) if e.seq > executions_after
        )
        # The record is bounded by DynamoDB's 400 KB item; executions get what is left.
        page, more = _fill(
            map(self._execution_view, executions),
            PAGE_LIMIT,
            RESPONSE_BUDGET - json_size(view) - json_size(cost),
        )
        return {
            "run": view,
            "executions": page,
            "executions_next": f"/runs/{run_id}?executions_after={page[-1]['seq']}" if more else None,
            "links": {"self": f"/runs/{run_id}", "messages": f"/runs/{run_id}/messages"},
            "cost": cost,
        }

    def _execution_view(self, execution: ToolExecution) -> dict[str, Any]:
        if execution.full_result_ref:
            execution = execution.model_copy(
                update={"full_result_url": self._presign(execution.full_result_ref)}
            )
        cut: dict[str, int] = {}
        view: dict[str, Any] = shorten(execution.model_dump(mode="json"), cut)
        if cut:  # parsed arguments or an error detail were long: the messages hold them whole
            view["truncated"] = cut
        return view

    def messages(self, run_id: str, caller: str, after: int = 0, limit: int = PAGE_LIMIT) -> dict[str, Any]:
        """Previews of the history items after seq `after`, in order; `next` reads on."""
        self._readable(run_id, caller)
        previews = (message_preview(run_id, item) for item in self._store.iter_history(run_id, after))
        page, more = _fill(previews, limit, RESPONSE_BUDGET)
        return {
            "messages": page,
            "next": f"/runs/{run_id}/messages?after={page[-1]['seq']}&limit={limit}" if more else None,
        }

    def message(self, run_id: str, caller: str, seq: int) -> dict[str, Any] | None:
        """One whole history item; when its JSON would not fit a response, a preview and a
        presigned URL of the stored object (`url`). None if the run has no such item."""
        self._readable(run_id, caller)
        item = self._store.get_item(run_id, seq)
        if item is None:
            return None
        whole: dict[str, Any] = HISTORY_ITEM.dump_python(item, mode="json")
        if json_size(whole) <= RESPONSE_BUDGET:
            return whole
        preview = message_preview(run_id, item)
        key = self._store.stored_message_key(run_id, seq)
        if key is not None:
            preview |= {"url": self._presign(key), "url_expires_in": URL_SECONDS}
        return preview


def _fill(entries: Iterable[dict[str, Any]], limit: int, budget: int) -> tuple[list[dict[str, Any]], bool]:
    """Take entries while the page has fewer than `limit` and its JSON stays within `budget`
    (one entry always, so a page makes progress); also whether any entry was left."""
    page: list[dict[str, Any]] = []
    used = 0
    for entry in entries:
        size = json_size(entry) - 1  # its quotes once, a separating comma
        if len(page) == limit or (page and used + size > budget):
            return page, True
        page.append(entry)
        used += size
    return page, False
