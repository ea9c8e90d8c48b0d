"""`toolpipe approve`, `deny` and `answer`: a person's decision on a call that waits."""

import argparse
from typing import Any, TextIO

from toolpipe.infra.cli.arguments import NO_JSON
from toolpipe.infra.cli.errors import EXIT_OK, CommandError, reason, refused
from toolpipe.infra.cli.output import write_json
from toolpipe.infra.cli.session import open_session


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
    answered = _post(args, action, body)
    if args.json:
        write_json(out, answered)
    else:
        out.write(f"{answered['status']} {answered['approval_id']} (run {answered['run_id']})\n")
    return EXIT_OK


def _post(args: argparse.Namespace, action: str, body: Any) -> Any:
    """`POST /approvals/{id}/{action}`: the API's answer, or the command's error."""
    session = open_session(args)
    try:
        status, answered = session.request("POST", f"/approvals/{args.approval_id}/{action}", body)
    finally:
        session.close()
    if status in (404, 409):
        # Unknown, not the caller's, decided or answered already, expired, or not a question.
        raise CommandError(reason(answered))
    if status != 200:
        raise refused(status, answered)
    return answered
