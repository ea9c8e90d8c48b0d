"""`toolpipe approve`, `deny` and `answer`: a person's decision on a call that waits."""

import argparse
from typing import Any, TextIO

from toolpipe.infra.cli.arguments import NO_JSON
from toolpipe.infra.cli.errors import EXIT_OK, CommandError, reason, refused
from toolpipe.infra.cli.output import write_json
from toolpipe.infra.cli.session import Session, open_session


def approve(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _decide(args, out, "approve", None if args.arguments is None else {"arguments": args.arguments})


def deny(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    return _decide(args, out, "deny", {"reason": args.reason})


def answer(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """A person's answer to a human-input call: free text, or `--value JSON` for a form's."""
    value = args.json_value if args.json_value is not NO_JSON else args.text
    body = _post(args, "answer", {"answer": value})
    if args.json:
        write_json(out, body)
    else:
        out.write(f"answered {body['approval_id']} (run {body['run_id']}, call {body['seq']})\n")
    return EXIT_OK


def _decide(args: argparse.Namespace, out: TextIO, action: str, body: Any) -> int:
    answered = _post(args, action, body, decision=True)
    if args.json:
        write_json(out, answered)
    else:
        out.write(f"{answered['status']} {answered['approval_id']} (run {answered['run_id']})\n")
    return EXIT_OK


def _post(args: argparse.Namespace, action: str, body: Any, decision: bool = False) -> Any:
    """`POST /approvals/{id}/{action}`: the API's answer, or the command's error."""
    session = open_session(args)
    try:
        if decision:
            _refuse_a_second(session, args.approval_id)
        status, answered = session.request("POST", f"/approvals/{args.approval_id}/{action}", body)
    finally:
        session.close()
    if status in (404, 409):
        # Unknown, not the caller's, decided or answered already, expired, or not a question.
        raise CommandError(reason(answered))
    if status != 200:
        raise refused(status, answered)
    return answered


def _refuse_a_second(session: Session, approval_id: str) -> None:
    """Refuse a decision on a call decided already (exit 1), as a different one is (a 409).

    The API answers the same decision again with a 200: a retried request whose answer was lost
    must not fail. A person who types `approve` twice is told instead that it changed nothing.
    Only while the first decision's delivery is uncertain is it sent again: that tells the
    waiting task again (functions/api/approvals.py)."""
    status, current = session.request("GET", f"/approvals/{approval_id}")
    if status == 200 and current.get("status") != "pending" and not current.get("delivery_uncertain"):
        raise CommandError(
            f"approval {approval_id} is already {current['status']}: the first decision stands"
        )
