"""How the commands write: what reaches a terminal, history items and waiting calls as lines,
JSON documents, and the one error line a failed command ends with."""

import contextlib
import json
import re
from typing import Any, TextIO

# Control characters other than newline and tab: a model's answer, a tool's result or a file a
# trigger read could carry terminal escapes (set the title, clear the screen) to whoever reads it.
# Bidirectional overrides and isolates too: they reorder what a person reads (an address in an
# approval shown as another).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


class Visible:
    """`out`, with every control character written as its escape (`\x1b`), not obeyed."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def write(self, text: str) -> int:
        return self._out.write(_CONTROL.sub(_escaped, text))

    def flush(self) -> None:
        self._out.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._out, name)


def short(text: str, limit: int = 300) -> str:
    """`text` on one line, cut at `limit` characters (saying how long it was)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def write_json(out: TextIO, document: Any) -> None:
    out.write(json.dumps(document, indent=2) + "\n")


def write_error(err: TextIO, message: str, code: int, as_json: bool) -> int:
    """The one line a failed command ends with (a JSON document with `--json`); returns `code`."""
    message = " ".join(message.split())  # one line, whatever the exception's message held
    line = json.dumps({"error": message, "exit_code": code}) if as_json else f"toolpipe: error: {message}"
    with contextlib.suppress(OSError):  # stderr may be a closed pipe too
        err.write(line + "\n")
        err.flush()
    return code


def format_item(item: dict[str, Any], own_agent: str | None = None) -> list[str]:
    """How one history item reads on a terminal; a reply of another agent than the run's own
    (`own_agent`: a handoff moved the run) names it."""
    kind = item["kind"]
    if kind == "user":
        who = "toolpipe (asks the model to repair its answer)" if item.get("repair") else "user"
        return [f"{who}: {short(item['content'])}"]
    if kind == "assistant":
        return _reply_lines(item, own_agent)
    mark = "->" if item["status"] == "ok" else "!!"
    took = f" ({item['duration_ms']} ms)" if item.get("duration_ms") is not None else ""
    return [f"  {mark} {item['tool']}: {short(item['content'])}{took}"]


def _reply_lines(item: dict[str, Any], own_agent: str | None) -> list[str]:
    if not item["tool_calls"]:
        by = f" ({item['agent']})" if item.get("agent") not in (None, own_agent) else ""
        return [f"answer{by}: {item.get('content') or ''}"]
    # A long list comes as its first entries; `truncated` has the whole count.
    count = item.get("truncated", {}).get("tool_calls", len(item["tool_calls"]))
    lines = [f"{who_answered(item, own_agent)} (turn {item['turn']}): {count} tool call(s)"]
    lines.extend(f"  call {c['name']}({short(c['arguments'], 200)})" for c in item["tool_calls"])
    if item.get("content"):
        lines.insert(1, f"  says: {short(item['content'])}")
    return lines


def who_answered(item: dict[str, Any], own_agent: str | None) -> str:
    """ "model", or, when the turn was another agent's than the run's own, "model [agent]"."""
    return f"model [{item['agent']}]" if item.get("agent") not in (None, own_agent) else "model"


def approval_line(approval: dict[str, Any]) -> str:
    """How a call that waits is announced while `run` watches: the id and the command (for a
    deferred call: the question and how to answer, or the request the program makes)."""
    kind = approval.get("kind", "approval")
    if kind == "human":
        form = " (a form: --value JSON)" if approval.get("result_schema") else ""
        return (
            f"  waiting for an answer: {approval['tool']} asks: {short(approval.get('question') or '', 200)}"
            f' · answer with: toolpipe answer {approval["approval_id"]} "…"{form}'
        ) + _link_line("or answer in a browser", approval)
    if kind == "client":
        return (
            f"  waiting for your program: {approval['tool']}({short(approval['arguments_preview'], 120)})"
            f" · post its result: POST /runs/{approval['run_id']}/calls/{approval['seq']}/result"
            ' {"result": …} (or {"error": "…"})'
        )
    line = (
        f"  waiting for approval: {approval['tool']}({short(approval['arguments_preview'], 120)})"
        f" · approve with: toolpipe approve {approval['approval_id']}"
        f" (or: toolpipe deny {approval['approval_id']} --reason '…')"
    )
    # The signed link a person opens to approve, deny or edit (README "The approval link").
    return line + _link_line("or approve in a browser", approval)


def _link_line(words: str, approval: dict[str, Any]) -> str:
    """The call's signed link on a line of its own, when it has one (the API knew its URL)."""
    url = approval.get("callback_url")
    return f"\n  {words}: {short(url, 2000)}" if isinstance(url, str) and url else ""
