"""`toolpipe fork RUN_ID --turn N [--input TEXT]`: a new run from a run's first N turns."""

import argparse
from typing import Any, TextIO

from toolpipe.infra.cli.commands.resume import post_on_run
from toolpipe.infra.cli.errors import EXIT_OK
from toolpipe.infra.cli.output import write_json


def fork(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Fork a run from a turn (`POST /runs/{id}/fork`): its first N turns copied, none re-run."""
    body: dict[str, Any] = {"turn": args.turn}
    if args.input is not None:
        body["input"] = args.input
    answer = post_on_run(args, "fork", body)  # a 409: a turn past the run's, or not complete
    if args.json:
        write_json(out, answer)
    else:
        out.write(
            f"forked {args.run_id} at turn {args.turn} into {answer['run_id']}; "
            f"follow it with: toolpipe show {answer['run_id']}\n"
        )
    return EXIT_OK
