"""`read_input`: the built-in tool through which a run started by an S3 object reads it.

The object is never pasted into the prompt: the model learns its name, size and type, and
reads the bytes it needs in ranges of at most `MAX_READ_BYTES`. The tool takes no bucket or
key: it reads the run's own object (`ToolContext.input_object`, written with the run record),
so a model cannot make it read anything else.
"""

import dataclasses
import threading
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any

from botocore.exceptions import ClientError
from pydantic import Field

from toolpipe.shared.tools import Tool, ToolContext, tool

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

    from toolpipe.shared.agents.agent import Agent

# One call's bytes: enough for a page of text, small enough that a few reads stay well under
# the agent's result limit and the model's context.
MAX_READ_BYTES = 64 * 1024


@cache
def _s3() -> "S3Client":
    import boto3  # once per cold start, in the tool worker only

    return boto3.client("s3")


# What S3 answers a read of the run's file once it was deleted or overwritten: 403 to a role that
# may not list the bucket, 404 to one that may, 412 to a read of an unversioned file that changed.
_GONE = frozenset({"AccessDenied", "403", "NoSuchKey", "NoSuchVersion", "404", "PreconditionFailed", "412"})


@tool(idempotent=True)  # a read: running it again after a crash has no effect
def read_input(
    ctx: ToolContext,
    offset: Annotated[int, Field(ge=0)] = 0,
    length: Annotated[int, Field(ge=1, le=MAX_READ_BYTES)] = MAX_READ_BYTES,
) -> str:
    """Read part of the file this run was started for, as text.

    Args:
        offset: The first byte to read (0 is the start of the file).
        length: How many bytes to read, at most 65536; read on from offset + length.
    """
    source = ctx.input_object
    if source is None:
        raise ValueError("this run was not started by a file: there is nothing to read")
    if offset >= max(source.size, 1):
        raise ValueError(f"offset {offset} is past the end of the file ({source.size} bytes)")
    end = min(offset + length, source.size) - 1
    extra: dict[str, Any] = {}
    if source.version_id is not None:
        extra["VersionId"] = source.version_id
    elif source.etag is not None:
        # Unversioned: the key may have been overwritten since; never read another file's bytes.
        extra["IfMatch"] = source.etag
    try:
        body = _s3().get_object(Bucket=source.bucket, Key=source.key, Range=f"bytes={offset}-{end}", **extra)
    except ClientError as e:
        code = str(e.response.get("Error", {}).get("Code", ""))
        if code not in _GONE:
            raise
        # Without s3:ListBucket (the tool runner has none) S3 answers a deleted key with 403.
        raise ValueError(
            f"the file this run was started for, s3://{source.bucket}/{source.key}, was deleted or "
            f"replaced since: it cannot be read as it was (S3 answered {code})"
        ) from None
    data = body["Body"].read(MAX_READ_BYTES)
    # A range may cut a character in two: undecodable bytes read as U+FFFD, the offsets stay exact.
    text = data.decode("utf-8", errors="replace")
    following = offset + len(data)
    more = f"next offset {following}" if following < source.size else "end of file"
    return f"[bytes {offset}-{following - 1} of {source.size}; {more}]\n{text}"


# Agents extended with `read_input`, per cold start: one per registered agent object.
_EXTENDED: dict[str, tuple["Agent", "Agent"]] = {}
_LOCK = threading.Lock()


def with_input_reader(agent: "Agent") -> "Agent":
    """`agent` with `read_input` among its tools (the same agent if it has it already)."""
    if read_input.name in agent.registry.names:
        return agent
    with _LOCK:
        base, found = _EXTENDED.get(agent.name, (None, None))
        if base is not agent or found is None:  # registered again (tests do): extend the new one
            tools: list[Tool] = [*agent.tools, read_input]
            found = dataclasses.replace(agent, tools=tools)
            _EXTENDED[agent.name] = (agent, found)
        return found
