"""Runs one call's tool code for the tool worker: the tool runner function, whose role holds no
key to the pipeline (no table, task token, event bus or model key). See shared/runs/tool_run.py.

Each call runs in a process of its own (shared/runs/call_process.py), forked from a template
that this function forks at its cold start, before any invocation: what a call patches, starts,
writes or sets ends with it, and no later call, of any run, sees it.
"""

import os
import sys
import tempfile
from typing import TYPE_CHECKING, Any

from toolpipe.shared import collector

# What the cold start builds here lasts the function's life: the collector's passes would only
# walk it, so it is built with the collector paused, then, on Lambda, frozen (shared/collector.py).
with collector.cold_start():
    import boto3
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from toolpipe.shared.agents import registered_in_code
    from toolpipe.shared.errors import ErrorKind
    from toolpipe.shared.runs import call_process, call_runner, tmp_files
    from toolpipe.shared.runs.call_host import prepare
    from toolpipe.shared.runs.tool_run import (
        HOOKS_GRACE_SECONDS,
        ToolRunRequest,
        ToolRunResponse,
        overran,
        run_tool_call,
    )
    from toolpipe.shared.settings import OverflowSettings
    from toolpipe.shared.tracing import trace_handler

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

logger = Logger()
settings = OverflowSettings.from_env()
# A Lambda response stops at 6 MB: a longer answer goes to S3, where the worker reads it.
INLINE_ANSWER_BYTES = 5_000_000
# What the invocation keeps after the tool for its answer (and the upload of a long one).
RESERVE_SECONDS = 5.0
# A call's process is ended this long after its own limit (which answers first, from inside).
END_AFTER_SECONDS = HOOKS_GRACE_SECONDS + 1.0
# A call with no limit (a handler called directly) still ends: Lambda's longest invocation.
NO_LIMIT_SECONDS = 900.0


def in_lambda() -> bool:
    return "AWS_LAMBDA_RUNTIME_API" in os.environ


# On Lambda the template is forked here, at the cold start: no invocation's data is in this
# process yet, so none is in the template nor in any call's process forked from it. Elsewhere
# the local runtime names the template of each runner function (`call_runner.register`).
if in_lambda():
    call_process.guard_this_process()
_processes = call_runner.CallProcesses.forked(then=prepare) if in_lambda() else None
# On Lambda /tmp outlives invocations, and is this function's alone: what a call leaves there
# (past its own folder, which goes with it) is removed after it, all but what was there at start
# and is as it was then (a file a call changed is removed: what it wrote may be read by the next).
_TMP = tempfile.gettempdir()
_TMP_AT_START = tmp_files.snapshot(_TMP) if in_lambda() else {}


@collector.cold_built
def s3() -> "S3Client":
    return boto3.client("s3")


@logger.inject_lambda_context(clear_state=True)
@trace_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    request = ToolRunRequest.model_validate(event)
    logger.append_keys(run_id=request.run_id, tool=request.call.name)
    left = max(1.0, context.get_remaining_time_in_millis() / 1000 - RESERVE_SECONDS)
    limit = left if request.time_limit is None else min(request.time_limit, left)
    answer = run_call(request.model_copy(update={"time_limit": limit}), context.function_name)
    # The response as Lambda sends it: JSON, where a quote or a control character takes more bytes.
    if request.overflow_key and len(answer.model_dump_json().encode()) > INLINE_ANSWER_BYTES:
        s3().put_object(Bucket=settings.bucket_name, Key=request.overflow_key, Body=answer.content.encode())
        answer = answer.model_copy(update={"content": "", "overflowed": True})
    return answer.model_dump(mode="json")


def run_call(request: ToolRunRequest, function_name: str) -> ToolRunResponse:
    """The call, run in a process of its own; its output logged, capped."""
    if not in_lambda() and registered_in_code(request.agent):
        # An agent a test put in this process's registry: a process that imports the app does
        # not have it. Its tools run here, as the docs' security page says.
        return run_tool_call(request)
    processes = _processes or call_runner.for_function(function_name)
    seconds = (request.time_limit or NO_LIMIT_SECONDS) + END_AFTER_SECONDS
    name = request.call.name
    try:
        answer, end = processes.run(request, seconds)
    except call_runner.RunnerUnavailableError as e:
        return _failed(f"Error: Tool '{name}' was not run: {e}. It had no effect; it may be called again.")
    finally:
        if _processes is not None:
            _processes.end_strays()
            _sweep_tmp()
    if end.output_bytes:
        _echo(end)
    if answer is not None:
        return answer
    if end.how == "overran":
        return overran(request)
    return _failed(f"Error: Tool '{name}' failed: {end.describe()}.")


def _sweep_tmp() -> None:
    tmp_files.sweep(_TMP, _TMP_AT_START, call_runner.remove_tree)


def _echo(end: call_runner.CallEnd) -> None:
    """What the call printed, where a print of the runner's goes (its log), capped: a tool that
    prints 100 MB leaves 64 KiB and a line saying how much more there was."""
    sys.stdout.write(end.output.decode(errors="replace"))
    if end.output_bytes > len(end.output):
        sys.stdout.write(
            f"\n(toolpipe: the call printed {end.output_bytes:,} bytes; the first {len(end.output):,} are kept)\n"
        )
    sys.stdout.flush()


def _failed(content: str) -> ToolRunResponse:
    return ToolRunResponse(content=content, status="error", error_type=ErrorKind.TOOL_FAILED)
