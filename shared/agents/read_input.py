"""`read_input`: the built-in tool through which a run started by an S3 object reads it.

The object is never pasted into the prompt: the model learns its name, size and type, and
reads the bytes it needs in ranges of at most `MAX_READ_BYTES`. The tool takes no bucket or
key: it reads the run's own object (`ToolContext.input_object`, written with the run record),
so a model cannot make it read anything else. In the tool runner it reads through the presigned
link the worker made for the call (`ToolContext.input_link`): the runner's role reads no input,
so no tool, however written, reads another run's file.
"""

import dataclasses
import re
import threading
import urllib.error
import urllib.request
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any

from botocore.exceptions import ClientError
from pydantic import Field

from toolpipe.shared.messages import InputObject
from toolpipe.shared.tools import Tool, ToolContext, tool

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

    from toolpipe.shared.agents.agent import Agent

# One call's bytes: enough for a page of text, small enough that a few reads stay well under
# the agent's result limit and the model's context.
MAX_READ_BYTES = 64 * 1024
# One read through the input link: S3 answers a range in well under a second.
LINK_TIMEOUT_SECONDS = 30


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
    if ctx.input_link is not None:
        data = _read_link(ctx.input_link, offset, end, source)
    else:  # run in the worker's own process (no runner function): its role reads the input
        try:
            body = _s3().get_object(
                Bucket=source.bucket, Key=source.key, Range=f"bytes={offset}-{end}", **extra
            )
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code not in _GONE:
                raise
            raise _gone(source, code) from None
        data = body["Body"].read(MAX_READ_BYTES)
    # A range may cut a character in two: undecodable bytes read as U+FFFD, the offsets stay exact.
    text = data.decode("utf-8", errors="replace")
    following = offset + len(data)
    more = f"next offset {following}" if following < source.size else "end of file"
    return f"[bytes {offset}-{following - 1} of {source.size}; {more}]\n{text}"


def _read_link(link: str, offset: int, end: int, source: InputObject) -> bytes:
    """Bytes `offset`..`end` of the run's object, through the worker's presigned link."""
    headers = {"Range": f"bytes={offset}-{end}"}
    if source.version_id is None and source.etag is not None:
        headers["If-Match"] = source.etag  # the link names no version: never another file's bytes
    request = urllib.request.Request(link, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=LINK_TIMEOUT_SECONDS) as answer:
            return bytes(answer.read(MAX_READ_BYTES))
    except urllib.error.HTTPError as e:
        with e:
            body = e.read(16 * 1024).decode("utf-8", errors="replace")
        code = _element(body, "Code") or str(e.code)
        if code == "AccessDenied" and "expired" in _element(body, "Message").lower():
            raise ValueError(
                "the link to this run's file expired: the call ran past its time limit"
            ) from None
        if code not in _GONE:
            raise ValueError(
                f"the file this run was started for could not be read: S3 answered {e.code} {code}"
            ) from None
        raise _gone(source, code) from None


def _element(xml: str, name: str) -> str:
    """The text of S3's error element `name` (`Code`, `Message`), or ''."""
    found = re.search(f"<{name}>([^<]{{1,500}})</{name}>", xml)
    return found.group(1) if found else ""


def _gone(source: InputObject, code: str) -> ValueError:
    # Without s3:ListBucket (neither the runner nor the worker has it) S3 answers a deleted key
    # with 403.
    return ValueError(
        f"the file this run was started for, s3://{source.bucket}/{source.key}, was deleted or "
        f"replaced since: it cannot be read as it was (S3 answered {code})"
    )


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
