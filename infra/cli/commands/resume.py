"""`toolpipe resume RUN_ID [--max-tool-calls N …]`: a run that ended failed or limit goes on."""

import argparse
from typing import Any, TextIO

from toolpipe.infra.cli.errors import EXIT_OK, CommandError, reason, refused
from toolpipe.infra.cli.output import write_json
from toolpipe.infra.cli.session import keyed, open_session

# The agent's limits a resume may raise: flag --max-tool-calls is the limit max_tool_calls.
LIMITS = ("max_iterations", "max_tool_calls", "max_tokens", "max_cost_usd", "max_duration")


def post_on_run(args: argparse.Namespace, action: str, body: dict[str, Any]) -> dict[str, Any]:
    """`POST /runs/{id}/<action>` (resume, fork): the 202's answer, or one line for a refusal."""
    session = open_session(args)
    try:
        status, answer = session.request("POST", f"/runs/{args.run_id}/{action}", body, keyed())
    finally:
        session.close()
    if status in (404, 409):
        # Unknown or not the caller's (404); a run or a turn it cannot go on from (409).
        raise CommandError(reason(answer))
    if status != 202:
        raise refused(status, answer)
    return dict(answer)


def resume(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Resume a run from its last stored turn in a new execution (`POST /runs/{id}/resume`)."""
    limits = {name: getattr(args, name) for name in LIMITS if getattr(args, name) is not None}
    body: dict[str, Any] = {"limits": limits} if limits else {}
    answer = post_on_run(args, "resume", body)  # a 409: running, succeeded or cancelled
    if args.json:
        write_json(out, answer)
    else:
        raised = ", ".join(f"{name} {value}" for name, value in limits.items())
        out.write(
            f"resumed {args.run_id} in execution {answer['execution']}"
            + (f" ({raised})" if raised else "")
            + f"; follow it with: toolpipe show {args.run_id}\n"
        )
    return EXIT_OK
