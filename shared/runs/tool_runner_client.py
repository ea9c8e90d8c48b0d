"""The tool worker's way to the tool runner function: one synchronous invocation per call.

The runner's role holds no key to the pipeline (shared/runs/tool_run.py). The invocation is
never retried once it may have reached the runner: a second one would run the tool twice.
"""

import json
import logging
import math
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from botocore.config import Config
from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError
from pydantic import ValidationError

from toolpipe.shared.costs import meter
from toolpipe.shared.errors import ErrorKind, describe_exception, error_text
from toolpipe.shared.messages import InputObject
from toolpipe.shared.runs.ports import certainly_not_sent
from toolpipe.shared.runs.tool_run import ToolRunRequest, ToolRunResponse
from toolpipe.shared.tools import Execution, Tool
from toolpipe.shared.tools.errors import ToolTimeoutError

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

logger = logging.getLogger(__name__)

# Where the runner puts a result too long to answer in line (a Lambda response stops at
# 6 MB): the one prefix its role may write, under a key made per call; a lifecycle rule
# expires what is left there.
OVERFLOW_PREFIX = "tool-results/"
# An invocation refused before it ran (throttled, no connection) is tried this often.
INVOKE_ATTEMPTS = 3
# How long an input link outlives the runner's own time limit: the clocks of the worker, the
# runner and S3 may differ by a few seconds.
LINK_SLACK_SECONDS = 60
INVOKE_BACKOFF_SECONDS = 0.5
READ_ATTEMPTS = 3


def invoke_config(runner_timeout_seconds: float) -> Config:
    """A client that waits for the runner's whole timeout and never retries on its own (botocore
    would send an invocation again after a read timeout: the tool would run twice)."""
    return Config(
        read_timeout=runner_timeout_seconds + 10,
        connect_timeout=5,
        retries={"total_max_attempts": 1},
    )


class LambdaToolRunner:
    def __init__(
        self,
        client: Any,  # a boto3 Lambda client (the project types no Lambda stubs)
        function_name: str,
        s3: "S3Client",
        bucket: str,
        timeout_seconds: float,
        sleep: Any = time.sleep,
        memory_mb: int = 512,
        runners: Mapping[str, str] | None = None,
    ) -> None:
        """`function_name`: the default runner's function; `runners`: each named runner's
        (`@tool(runner=...)`), by name."""
        self._client, self._function = client, function_name
        self._runners = dict(runners or {})
        self._s3, self._bucket = s3, bucket
        self._timeout = timeout_seconds
        self._sleep = sleep
        self._memory_mb = memory_mb

    def run(self, request: ToolRunRequest, tool: Tool | None) -> ToolRunResponse:
        name = request.call.name
        runner = tool.runner if tool is not None else None
        function = self._function if runner is None else self._runners.get(runner)
        if function is None:
            # Never the default runner instead: its role is not the one the tool was granted.
            return ToolRunResponse.of(
                Execution.failed(
                    ErrorKind.TOOL_FAILED,
                    f"Tool '{name}' was not run: it runs in runner '{runner}', which this "
                    "deployment does not have (ToolPipeline(..., runners=[...])). It had no effect.",
                )
            )
        key = f"{OVERFLOW_PREFIX}{uuid.uuid4().hex}"
        update: dict[str, Any] = {"overflow_key": key}
        if request.input_object is not None and tool is not None and tool.context_param is not None:
            update["input_link"] = self._input_link(request.input_object)
        payload = request.model_copy(update=update).model_dump_json().encode()
        for attempt in range(1, INVOKE_ATTEMPTS + 1):
            started = time.monotonic()
            try:
                response = self._client.invoke(FunctionName=function, Payload=payload)
                self._count(started)
                break
            except Exception as e:
                if not _never_reached_the_runner(e):
                    self._count(started)
                    return _unknown(name, describe_exception(e))
                if attempt == INVOKE_ATTEMPTS:
                    return ToolRunResponse.of(
                        Execution.failed(
                            ErrorKind.TOOL_FAILED,
                            f"Tool '{name}' was not run: its function could not be invoked "
                            f"({describe_exception(e)}). It had no effect; it may be called again.",
                        )
                    )
                logger.warning("invoking the tool runner was refused; trying again", extra={"tool": name})
                self._sleep(INVOKE_BACKOFF_SECONDS * 2 ** (attempt - 1))
        body = response["Payload"].read()
        if response.get("FunctionError"):
            return self._function_error(name, tool, body)
        try:
            answer = ToolRunResponse.model_validate_json(body)
        except ValidationError:
            return _unknown(name, "its function answered something that is not a result")
        if answer.overflowed:
            meter.count({"s3_tier1_requests": 1})  # the runner's PUT of the long answer
            answer = self._overflowed(name, key, answer)
        return answer

    def _input_link(self, source: InputObject) -> str:
        """A presigned GET of the run's own input, for a tool that may read it (`read_input`).

        The runner's role reads no input: a tool of one run holds a link to that run's object
        (at its version when the bucket keeps versions) and no key to any other's. Signed here,
        with the worker's role; valid for as long as the runner may run, and a little more.
        """
        params = {"Bucket": source.bucket, "Key": source.key}
        if source.version_id is not None:
            params["VersionId"] = source.version_id
        return self._s3.generate_presigned_url(
            "get_object", Params=params, ExpiresIn=math.ceil(self._timeout) + LINK_SLACK_SECONDS
        )

    def _count(self, started: float) -> None:
        """The runner's invocation, in the run's cost: its role holds no key to the table, so
        the worker that waited for it counts it, for as long as it waited (what Lambda billed,
        and a little more: the invoke's own round trip)."""
        waited_ms = math.ceil((time.monotonic() - started) * 1000)
        meter.count_function("tool_runner", waited_ms, self._memory_mb)

    def _overflowed(self, name: str, key: str, answer: ToolRunResponse) -> ToolRunResponse:
        """The whole of a long answer, read back (tried as the worker's own writes are) and
        deleted: the tool ran, so a read that never succeeds is said, never an invocation that
        fails and leaves the call to end "in doubt" a visibility timeout later."""
        for attempt in range(1, READ_ATTEMPTS + 1):
            try:
                whole = self._s3.get_object(Bucket=self._bucket, Key=key)["Body"].read().decode()
                break
            except Exception as e:
                if attempt == READ_ATTEMPTS:
                    lost = error_text(
                        f"Tool '{name}' ran, but its result could not be read back "
                        f"({describe_exception(e)}): it has taken effect."
                    )
                    return ToolRunResponse.of(
                        Execution(lost, "error", answer.duration_ms, ErrorKind.TOOL_FAILED)
                    )
                self._sleep(INVOKE_BACKOFF_SECONDS * 2 ** (attempt - 1))
        try:
            self._s3.delete_object(Bucket=self._bucket, Key=key)
        except Exception:  # the bucket's lifecycle rule expires what is left
            logger.warning("deleting a long tool answer failed", extra={"tool": name})
        return answer.model_copy(update={"content": whole, "overflowed": False})

    def _function_error(self, name: str, tool: Tool | None, body: bytes) -> ToolRunResponse:
        """The runner's invocation ended without an answer: it ran out of time or its process
        died (memory, `os._exit`). Either way the tool may have had its effect."""
        try:
            error = json.loads(body)
            kind, message = str(error.get("errorType", "")), str(error.get("errorMessage", ""))
        except (ValueError, AttributeError):
            kind, message = "", body.decode(errors="replace")[:200]
        idempotent = tool is not None and tool.idempotent
        if "timed out" in message.lower() or kind.endswith("Timedout"):
            overran = ToolTimeoutError(name, self._timeout, idempotent, worker_limit=True)
            return ToolRunResponse.of(Execution.failed(overran.kind, str(overran)))
        return _unknown(name, f"its function stopped ({kind or 'error'}: {' '.join(message.split())[:300]})")


def _never_reached_the_runner(error: BaseException) -> bool:
    """Whether the invocation certainly did not run: refused by Lambda (throttled, or any 4xx:
    a function error comes back as an answer, not an error) or its connection never opened. A
    TLS or read error may come after the request was sent: the tool may be running."""
    if isinstance(error, EndpointConnectionError | ConnectTimeoutError):
        return True
    return isinstance(error, ClientError) and certainly_not_sent(error)


def _unknown(name: str, why: str) -> ToolRunResponse:
    return ToolRunResponse.of(
        Execution.failed(
            ErrorKind.IN_DOUBT,
            f"the call to '{name}' was interrupted ({why}) and may or may not have taken effect. "
            "Check its effect before calling it again.",
        )
    )
