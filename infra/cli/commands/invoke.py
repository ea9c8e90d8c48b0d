"""`toolpipe invoke FUNCTION EVENT`: one real handler on an event file, on the local runtime."""

import argparse
import json
import os
import traceback
import urllib.parse
from pathlib import Path
from typing import Any, TextIO

from toolpipe.infra.cdk.functions import FUNCTIONS
from toolpipe.infra.cli.discovery import serving, state_dir, try_lock
from toolpipe.infra.cli.errors import EXIT_OK, EXIT_USAGE, CommandError, reason
from toolpipe.infra.cli.model_endpoint import model_endpoint
from toolpipe.infra.cli.output import short, write_json


def invoke(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Feed an event file to one real handler on the local runtime; RUN_ID and APPROVAL_ID in it
    are replaced (`--run-id`, `--approval-id`).

    A Step Functions status-change event reaches the orchestrator as the stack's rule
    transforms it; `--object FILE` first puts FILE as the object an S3 notification names
    (without the bucket's own notification, so only the sample starts a run). stdout gets the
    handler's result as JSON, or Lambda's error payload (`errorType`, `errorMessage`) and exit 1;
    an API answer of 4xx or 5xx is printed too, then exit 1 with the status on stderr."""
    from toolpipe.infra.local.logfile import logs_to_file, record_traceback

    event = _event(args)
    home = state_dir()
    # This command holds the folder's state itself: with a server serving it too, whichever
    # saved last would erase the other's runs.
    lock = try_lock(home)
    if lock is None:
        raise CommandError(
            f"{serving(home)} is serving {home}: stop it first, or set TOOLPIPE_HOME", EXIT_USAGE
        )
    try:
        with logs_to_file(home, echo=err if args.verbose else None):
            result, failure = _invoke_in_runtime(args, event, home, err)
    finally:
        os.close(lock)
    write_json(out, result)
    if failure is not None:
        logged = record_traceback(home, "invoke", failure)
        if args.verbose:
            err.write("".join(traceback.format_exception(failure)))
        raise CommandError(
            f"{args.function} raised {type(failure).__name__}: {failure}"
            + (f" (traceback in {logged})" if logged else "")
        )
    if status := _error_status(result):
        raise CommandError(f"{args.function} answered {status}: {_message(result)}")
    return EXIT_OK


def _error_status(result: Any) -> int | None:
    """The status of an HTTP-shaped answer (`statusCode`, as API Gateway reads it) that is an
    error, 4xx or 5xx; None for any other result."""
    status = result.get("statusCode") if isinstance(result, dict) else None
    return status if isinstance(status, int) and not isinstance(status, bool) and status >= 400 else None


def _message(result: dict[str, Any]) -> str:
    """What the answer's body says, short: its `message` when it is the API's JSON error."""
    body = result.get("body")
    try:
        parsed = json.loads(body) if isinstance(body, str) else body
    except ValueError:  # an HTML page (the approval page's errors)
        parsed = None
    return short(reason(parsed) if isinstance(parsed, dict) else "(no JSON message; the body is above)", 200)


def _event(args: argparse.Namespace) -> Any:
    """The event file, RUN_ID and APPROVAL_ID replaced, as the function receives it."""
    from toolpipe.infra.cdk.definition import EXECUTION_ENDED_DETAIL_TYPE, execution_ended_request

    text = args.event.read_text()
    if args.run_id:
        text = text.replace("RUN_ID", args.run_id)
    if args.approval_id:
        text = text.replace("APPROVAL_ID", args.approval_id)
    event = json.loads(text)  # JSON before (checked while parsing), and neither id has a quote
    if args.function == "orchestrator" and event.get("detail-type") == EXECUTION_ENDED_DETAIL_TYPE:
        event = execution_ended_request(event)
    return event


def _invoke_in_runtime(
    args: argparse.Namespace, event: Any, home: Path, err: TextIO
) -> tuple[Any, Exception | None]:
    # The runtime first: its import pauses the collector, then freezes what it made (moto,
    # botocore), which the others import too.
    from toolpipe.infra.local.runtime import LocalRuntime  # noqa: I001
    from toolpipe.infra.local import triggers
    from toolpipe.infra.local.lambdas import call_function

    # Workers run too: a run the event starts finishes before the runtime shuts down.
    with model_endpoint(args) as model, LocalRuntime(state_dir=home) as runtime:
        err.write(model.line())
        if args.object:
            for record in event.get("Records", []):
                key = urllib.parse.unquote_plus(record["s3"]["object"]["key"])
                # The sample's eTag and size are its own file's: the notification tells of this put.
                record["s3"]["object"].update(triggers.put_quietly(runtime.s3, key, args.object.read_bytes()))
        try:
            return call_function(FUNCTIONS[args.function], event), None
        except Exception as e:  # the function's error, as Lambda reports it to whoever invoked it
            return {"errorType": type(e).__name__, "errorMessage": str(e)}, e
