"""`toolpipe approvals`: the calls that wait for a person (or were decided), newest first."""

import argparse
from typing import Any, TextIO

from toolpipe.infra.cli.errors import EXIT_OK, refused
from toolpipe.infra.cli.offline import open_reading_session
from toolpipe.infra.cli.output import short, write_json


def approvals(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The approvals of the caller's runs (the admin principal's: everyone's), newest first."""
    session = open_reading_session(args)
    try:
        query = "" if args.status == "all" else f"?status={args.status}"
        status, body = session.request("GET", f"/approvals{query}")
    finally:
        session.close()
    if status != 200:
        raise refused(status, body)
    if args.json:
        write_json(out, body)
        return EXIT_OK
    for approval in body["approvals"]:
        out.write(_approval_row(approval))
    if not body["approvals"]:
        err.write(f"no {'' if args.status == 'all' else args.status + ' '}approvals\n")
    return EXIT_OK


def _approval_row(a: dict[str, Any]) -> str:
    decided = f" by {a['decided_by']}" if a.get("decided_by") else ""
    reason = f": {short(a['reason'], 200)}" if a.get("reason") else ""  # one line each
    kind = a.get("kind", "approval")
    # A question for a person reads as its question; the others as the call.
    what = (
        f"asks: {short(a.get('question') or '', 80)}"
        if kind == "human"
        else f"{a['tool']}({short(a['arguments_preview'], 80)})"
    )
    answer = f" {short(a['answer_preview'], 80)}" if a.get("answer_preview") else ""
    return (
        f"{a['approval_id']}  {kind}  {a['status']}{decided}{reason}{answer}  {what}"
        f"  run {a['run_id']}  expires {a['expires_at']}\n"
    )
