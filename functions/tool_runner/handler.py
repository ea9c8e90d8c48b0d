"""Runs one call's tool code for the tool worker: the tool runner function, whose role holds no
key to the pipeline (no table, task token, event bus or model key). See shared/runs/tool_run.py."""

from functools import cache
from typing import TYPE_CHECKING, Any

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from toolpipe.shared.runs.tool_run import ToolRunRequest, run_tool_call
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


@cache
def s3() -> "S3Client":
    return boto3.client("s3")


@logger.inject_lambda_context(clear_state=True)
@trace_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    request = ToolRunRequest.model_validate(event)
    logger.append_keys(run_id=request.run_id, tool=request.call.name)
    left = max(1.0, context.get_remaining_time_in_millis() / 1000 - RESERVE_SECONDS)
    limit = left if request.time_limit is None else min(request.time_limit, left)
    answer = run_tool_call(request.model_copy(update={"time_limit": limit}))
    # The response as Lambda sends it: JSON, where a quote or a control character takes more bytes.
    if request.overflow_key and len(answer.model_dump_json().encode()) > INLINE_ANSWER_BYTES:
        s3().put_object(Bucket=settings.bucket_name, Key=request.overflow_key, Body=answer.content.encode())
        answer = answer.model_copy(update={"content": "", "overflowed": True})
    return answer.model_dump(mode="json")
