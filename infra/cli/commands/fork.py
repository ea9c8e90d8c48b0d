"""`toolpipe fork RUN_ID --turn N [--input TEXT]`: a new run from a run's first N turns."""

import argparse
from typing import Any, TextIO

from toolpipe.infra.cli.errors import EXIT_OK, CommandError, reason, refused
from toolpipe.infra.cli.output import write_json
from toolpipe.infra.cli.session import open_session


def fork(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Fork a run from a turn (`POST /runs/{id}/fork`): its first N turns copied, none re-run."""
    body: dict[str, Any] = {"turn": args.turn}
    if args.input is not None:
        body["input"] = args.input
    session = open_session(args)
    try:
        status, answer = session.request("POST", f"/runs/{args.run_id}/fork", body)
    finally:
        session.close()
    if status in (404, 409):
        # Unknown or not the caller's; a turn past the run's, or not complete.
        raise CommandError(reason(answer))
    if status != 202:
        raise refused(status, answer)
    if args.json:
        write_json(out, answer)
    else:
        out.write(
            f"forked {args.run_id} at turn {args.turn} into {answer['run_id']}; "
            f"follow it with: toolpipe show {answer['run_id']}\n"
        )
    return EXIT_OK
