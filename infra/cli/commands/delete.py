"""`toolpipe delete RUN_ID`: an ended run, with its child runs, deleted now."""

import argparse
from typing import TextIO

from toolpipe.infra.cli.errors import EXIT_OK, CommandError, reason, refused
from toolpipe.infra.cli.output import write_json
from toolpipe.infra.cli.session import open_session


def delete(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Delete an ended run, with its child runs, now (`DELETE /runs/{id}`)."""
    session = open_session(args)
    try:
        status, body = session.request("DELETE", f"/runs/{args.run_id}")
    finally:
        session.close()
    if status in (404, 409):
        # Unknown or not the caller's (or deleted already); still running: cancel it first.
        raise CommandError(reason(body))
    if status != 204:
        raise refused(status, body)
    if args.json:
        write_json(out, {"run_id": args.run_id, "deleted": True})
    else:
        out.write(f"deleted {args.run_id}\n")
    return EXIT_OK
