"""The runtime's end of a tool process's AWS calls (`aws_forwarding.py`): each is made here, as
the runner function the broker serves, so the IAM check authorizes it against that runner's role.

One broker per runner function, on a Unix socket in a folder only this user may enter. Who the
caller is comes from which broker a request reaches, never from the request: a tool process
holds no credential that could name another function, and nothing it sends is unpickled. The
one exception is a presigned S3 link (`read_input`'s): S3 authorizes it as its signer, so the
broker checks it and reads as the function that signs them, the worker (`s3_links.py`).
"""

import contextlib
import fcntl
import json
import os
import pickle
import re
import shutil
import socket
import stat
import struct
import tempfile
import threading
from collections.abc import Callable
from typing import Any

import boto3
from botocore.client import BaseClient
from botocore.exceptions import ClientError

from toolpipe.infra.local import aws_forwarding, s3_links
from toolpipe.infra.local.isolation import FunctionContext, running_as
from toolpipe.shared.errors import describe_exception

REGION = "us-east-1"
CONNECTIONS = 32
# struct ucred, what SO_PEERCRED answers: the connecting process's pid, uid and gid.
_PEER = struct.Struct("3i")
# Each broker's folder: `toolpipe-aws-<pid>-<random>` in the temporary folder, holding the
# socket and `alive`, a file the broker keeps locked (flock) while it runs. A runtime killed
# (kill -9, a crash) cannot remove its folder, but the kernel drops its lock: the next broker
# removes the folders whose lock it can take. Not by pid: a runtime in another PID namespace
# (a container sharing /tmp) has a pid that looks gone from here.
FOLDER_PREFIX = "toolpipe-aws-"
ALIVE = "alive"
# A region's name as AWS spells them (`us-east-1`, `us-gov-west-1`): a client is kept per region.
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d{1,2}")


def sweep_dead_folders() -> None:
    """Remove the broker folders of this user's runtimes that have ended without removing them."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        if not name.startswith(FOLDER_PREFIX):
            continue
        path = os.path.join(root, name)
        try:
            found = os.stat(path, follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
            continue  # another user's (not ours to judge), or not a folder a broker made
        if not _held(path):
            shutil.rmtree(path, ignore_errors=True)


def _held(folder: str) -> bool:
    """Whether a running broker holds the folder (its `alive` locked), or it cannot be told: a
    folder without `alive` is one being made right now (or by an older version) and is kept."""
    try:
        fd = os.open(os.path.join(folder, ALIVE), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True  # locked: its broker runs
    finally:
        os.close(fd)  # and with it the lock taken just now
    return False


def _hold(folder: str) -> int:
    """Lock `alive` in the new folder for as long as the returned descriptor stays open: made
    under another name and renamed once locked, so a sweep never finds it unlocked."""
    making = os.path.join(folder, f".{ALIVE}")
    fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    # Where the file system has no locks, a sweep cannot take this one either: kept (`_held`).
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(making, os.path.join(folder, ALIVE))
    return fd


class AwsBroker:
    """`with AwsBroker(context) as broker:` AWS calls on `broker.path`, made as `context`."""

    def __init__(self, context: FunctionContext) -> None:
        self.context = context
        # Which processes may call as `context`: its runner's calls alone (`ToolProcesses`).
        self.admits: Callable[[int], bool] = lambda pid: True
        sweep_dead_folders()
        self._folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
        os.chmod(self._folder, 0o700)
        self._alive = _hold(self._folder)
        self.path = os.path.join(self._folder, "aws.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(64)
        self._clients: dict[tuple[str, str], BaseClient] = {}
        # A tool process's connections at once: each is a thread here, and holds a message.
        self._connections = threading.BoundedSemaphore(CONNECTIONS)
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name=f"aws-broker-{context.name}", daemon=True)

    def __enter__(self) -> "AwsBroker":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        shutil.rmtree(self._folder, ignore_errors=True)
        alive, self._alive = self._alive, -1
        if alive >= 0:  # once: a descriptor's number is reused after its close
            os.close(alive)

    def _accept(self) -> None:
        while not self._closed:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            if not self._admitted(connection):
                connection.close()  # another runner's call, or any other process of this user
                continue
            if not self._connections.acquire(blocking=False):
                connection.close()  # a call opening connections by the thousand gets no more
                continue
            threading.Thread(
                target=self._serve, args=(connection,), name="aws-broker-call", daemon=True
            ).start()

    def _admitted(self, connection: socket.socket) -> bool:
        """Whether the process at the other end runs under this runner's template: the socket's
        path is no secret (any process of this user may connect), the caller's process is."""
        if not hasattr(socket, "SO_PEERCRED"):
            return True  # not Linux: no peer's pid to check (docs/operations/security.md)
        credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER.size)
        pid, _, _ = _PEER.unpack(credentials)
        return self.admits(pid)

    def _serve(self, connection: socket.socket) -> None:
        try:
            self._answer(connection)
        finally:
            self._connections.release()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            while not self._closed:
                try:
                    request = aws_forwarding.receive(connection)
                except (OSError, ValueError):
                    return
                if request is None:
                    return
                answer = self.call(request)
                try:
                    aws_forwarding.send(connection, pickle.dumps(answer))
                except OSError:
                    return

    def _client(self, service: str, region: str) -> BaseClient:
        with self._lock:
            client = self._clients.get((service, region))
            if client is None:
                client = self._clients[(service, region)] = boto3.client(service, region_name=region)  # type: ignore[call-overload]
            return client

    def call(self, request: bytes) -> dict[str, Any]:
        """One call a tool sent, made as this broker's function: its answer, to pickle."""
        try:
            sent = json.loads(request)
            if isinstance(sent, dict) and sent.get("op") == "link":
                client = self._client("s3", REGION)
                return {
                    "link": s3_links.follow(
                        str(sent["url"]), dict(sent.get("headers") or {}), self.context, client
                    )
                }
            service, region, operation = (
                str(sent["service"]),
                str(sent["region"] or REGION),
                str(sent["operation"]),
            )
            if not _REGION.fullmatch(region):
                raise ValueError(f"{region[:40]!r} is not a region")
            params = aws_forwarding.decode(sent["params"])
            if not isinstance(params, dict):
                raise TypeError("parameters are not an object")
            client = self._client(service, region)
        except Exception as e:  # a request no botocore client would send
            return {"failure": f"a request the local AWS cannot read: {describe_exception(e)}"}
        try:
            with running_as(self.context):
                response = client._make_api_call(operation, params)  # type: ignore[attr-defined]
        except ClientError as e:
            return {"error": e.response}
        except Exception as e:
            return {"failure": describe_exception(e)}
        streams = [key for key, value in response.items() if hasattr(value, "read")]
        for key in streams:
            response[key] = response[key].read()
        return {"response": response, "streams": streams}
