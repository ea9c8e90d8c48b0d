"""A tool's AWS calls, from its own process, made by the local runtime as the tool runner.

Under the local runtime a call's tool code runs in a process of its own (shared/runs/
call_process.py), where there is no emulated AWS. `install` (in that process) replaces the one
method every botocore client call goes through, `BaseClient._make_api_call`, by one that checks
the parameters as botocore does, sends the operation and its parameters over a socket to the
runtime's broker for that runner function (`aws_broker.py`), and answers what it answers: the
parsed response, or the service's error as the client's own exception class. The broker makes
the call as the runner function, so the runtime's IAM check (`iam.py`) authorizes it against the
runner's role. Replacing this method from tool code gains nothing: the socket is the only way to
the emulated AWS, and the broker decides who the caller is.

What goes to the broker is JSON (bytes and datetimes tagged): the runtime never unpickles
anything a tool sent. What comes back is a pickle of botocore's parsed response, streams read.

A presigned S3 link (the one `read_input` is given) is not a botocore call: a `urllib` request
of an `*.amazonaws.com` URL goes to the broker too, which answers it as S3 would, or refuses it.
"""

import base64
import datetime
import io
import json
import os
import pickle
import socket
import struct
import threading
import urllib.error
import urllib.request
from typing import Any

from botocore.client import BaseClient
from botocore.response import StreamingBody
from botocore.validate import validate_parameters

from toolpipe.infra.local import s3_links

# The broker's socket, in the tool process's environment.
LOCAL_AWS_ENV = "TOOLPIPE_LOCAL_AWS"
_HEADER = struct.Struct(">I")
# What one request or answer may hold (an S3 object read or put whole, locally).
MESSAGE_LIMIT_BYTES = 64 * 1024 * 1024
# The tags `encode` writes; a dict of the caller's own with one of these as its only key is
# wrapped in `__dict__`, so it arrives as sent.
_TAGS = frozenset({"__bytes__", "__datetime__", "__dict__"})

_path: str | None = None
_lock = threading.Lock()
_connection: tuple[int, socket.socket] | None = None  # (pid, socket): a forked child opens its own


def install(path: str) -> None:
    global _path
    _path = path
    BaseClient._make_api_call = _forwarded  # type: ignore[attr-defined]
    urllib.request.install_opener(urllib.request.build_opener(s3_links.LinkHandler(_follow)))


def _follow(url: str, headers: dict[str, str]) -> dict[str, Any]:
    answer = _exchange(json.dumps({"op": "link", "url": url, "headers": headers}).encode())
    if "failure" in answer:
        raise urllib.error.URLError(f"local AWS: {answer['failure']}")
    link: dict[str, Any] = answer["link"]
    return link


def encode(value: Any) -> Any:
    """`value` as JSON: bytes, file-likes (read) and datetimes tagged."""
    if isinstance(value, dict):
        encoded = {str(k): encode(v) for k, v in value.items()}
        return {"__dict__": encoded} if len(encoded) == 1 and set(encoded) <= _TAGS else encoded
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return {"__bytes__": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, datetime.datetime):
        return {"__datetime__": value.isoformat()}
    if hasattr(value, "read"):
        data = value.read()
        return encode(data.encode() if isinstance(data, str) else data)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"a parameter of type {type(value).__name__} cannot be sent to the local AWS")


def decode(value: Any) -> Any:
    """What `encode` made, back: the broker's side."""
    if isinstance(value, dict):
        if set(value) == {"__bytes__"}:
            return base64.b64decode(value["__bytes__"])
        if set(value) == {"__datetime__"}:
            return datetime.datetime.fromisoformat(value["__datetime__"])
        if set(value) == {"__dict__"} and isinstance(value["__dict__"], dict):
            return {k: decode(v) for k, v in value["__dict__"].items()}
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def send(connection: socket.socket, data: bytes) -> None:
    connection.sendall(_HEADER.pack(len(data)) + data)


def receive(connection: socket.socket) -> bytes | None:
    """One message, or None when the other side closed."""
    header = _exactly(connection, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MESSAGE_LIMIT_BYTES:
        raise ValueError(f"a message of {size} bytes is over the local AWS's {MESSAGE_LIMIT_BYTES}")
    return _exactly(connection, size)


def _exactly(connection: socket.socket, size: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = connection.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


def _exchange(request: bytes) -> Any:
    global _connection
    if _path is None:
        raise RuntimeError("the local AWS is not reachable from here")
    with _lock:
        if _connection is None or _connection[0] != os.getpid():
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.connect(_path)
            _connection = (os.getpid(), connection)
        connection = _connection[1]
        send(connection, request)
        answer = receive(connection)
    if answer is None:
        raise ConnectionError("the local runtime stopped answering AWS calls")
    return pickle.loads(answer)  # from the runtime, never from a tool


def _forwarded(self: BaseClient, operation_name: str, api_params: dict[str, Any]) -> Any:
    model = self.meta.service_model
    shape = model.operation_model(operation_name).input_shape
    if shape is not None:
        validate_parameters(api_params, shape)
    request = {
        "service": model.service_name,
        "region": self.meta.region_name,
        "operation": operation_name,
        "params": encode(api_params),
    }
    answer = _exchange(json.dumps(request).encode())
    if "error" in answer:
        code = str(answer["error"].get("Error", {}).get("Code", ""))
        error: Any = self.exceptions.from_code(code)  # a ClientError subclass, typed as an instance
        raise error(answer["error"], operation_name)
    if "failure" in answer:
        raise RuntimeError(f"local AWS: {answer['failure']}")
    response: dict[str, Any] = answer["response"]
    for key in answer.get("streams", ()):
        data = response[key]
        response[key] = StreamingBody(io.BytesIO(data), len(data))
    return response
