"""Tool runners' templates forked from one prepared interpreter, not each started afresh.

A runner's template started as a fresh interpreter (`call_runner.spawn`) spends ~0.3 s of CPU
importing botocore, pydantic and toolpipe before it imports the app, and a process starts one
for every local runtime it brings up: a project's tests with `LocalPipeline` each test,
`toolpipe serve` each time the app changes. The *fork server* is one interpreter that imports
those once (never the app) and then only forks: each template is a child of it that takes its
runner's environment, folder, `sys.path` and standard streams, then goes on as a fresh one does
(`tool_host`: it guards itself, sends its AWS calls to the runner's broker, imports the app).

What keeps a forked template what a fresh one is:
- The server's environment is the template's less every `TOOLPIPE_` and `AWS_` setting (the
  model's settings and the developer's credentials are left out before: `tool_processes.py`),
  and nothing it imports reads those at import. It keeps no runner's settings or broker's path:
  each request is read into one buffer, zeroed once the template is forked. A template whose other settings differ (`PYTHON*`, the locale, `PATH`) gets a
  server started with them, as the interpreter reads some of them only as it starts.
- It never imports the app and never sees a call: a call's process inherits nothing from it that
  a fresh interpreter would not have (`random` reseeds itself in every fork).
- It is not dumpable: a tool process of the same user cannot attach to it (ptrace,
  /proc/PID/mem) and change what later templates, of other runtimes, run. Its socket is the
  runtime's alone: each child closes it first.
- A server that does not answer within `ANSWER_SECONDS`, or has ended (a tool can signal it),
  is replaced, and the template starts afresh meanwhile; so does every template where there are
  no pidfds to wait on one that is not our child (not Linux).
"""

import array
import atexit
import contextlib
import importlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping

from toolpipe.shared.runs import call_runner

# A template forked, or the server's answer: how long the runtime waits for it.
ANSWER_SECONDS = 10.0
# What one request may hold (the template's environment, as JSON): a larger one starts afresh.
REQUEST_LIMIT_BYTES = 256 * 1024
_PID = struct.Struct(">I")
_FD = array.array("i")
_PR_SET_DUMPABLE = 4
# The settings a template has that its server has not (see the module's docstring).
_RUNNER_PREFIXES = ("TOOLPIPE_", "AWS_")
HOST_MODULE = "toolpipe.infra.local.tool_host"
_SERVER_MODULE = "toolpipe.infra.local.fork_server"

Started = tuple[socket.socket, Callable[[], None], int]


def usable() -> bool:
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "pidfd_open")
        and hasattr(signal, "pidfd_send_signal")
    )


def start_template(environment: Mapping[str, str], started: Callable[[int], None]) -> Started:
    """A runner's template with `environment` (what `call_runner.spawn` takes), forked from the
    fork server for its settings; started afresh where none can fork it."""
    env = dict(environment)
    if usable():
        folder = tempfile.mkdtemp(prefix="toolpipe-runner-")
        ours, theirs = socket.socketpair()
        try:
            forked = _server_for(env).fork(env, folder, theirs)
        finally:
            theirs.close()
        if forked is not None:
            return _waited(ours, folder, *forked, started)
        ours.close()
        call_runner.remove_tree(folder)
    return call_runner.spawn(env, None, HOST_MODULE, started)


def _waited(
    connection: socket.socket, folder: str, pid: int, pidfd: int, started: Callable[[int], None]
) -> Started:
    """The runtime's side of a forked template: as `call_runner.spawn`'s, waited on by its pidfd
    (it is the server's child, not ours)."""
    started(pid)
    ready = connection.recv(4096)  # the template says so once it has imported the app

    def stop() -> None:
        if not _ended(pidfd, 5.0):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)  # its session's group: it leads it
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            _ended(pidfd, None)
        os.close(pidfd)
        call_runner.remove_tree(folder)

    if ready != b"ready":
        connection.close()
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        stop()
        raise call_runner.RunnerUnavailableError(
            ready.decode(errors="replace") or "the runner's template process ended"
        )
    return connection, stop, pid


def _ended(pidfd: int, seconds: float | None) -> bool:
    """Whether the process ended within `seconds` (None: however long it takes)."""
    poll = select.poll()  # not select(): a process may hold fds past FD_SETSIZE
    poll.register(pidfd, select.POLLIN)
    return bool(poll.poll(None if seconds is None else seconds * 1000))


class _Server:
    """The runtime's handle on one fork server."""

    def __init__(self, settings: dict[str, str]) -> None:
        self.settings = settings
        self.owner = os.getpid()  # a process forked from this one starts a server of its own
        self._lock = threading.Lock()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._connection = ours
        # Its own empty folder, first on its sys.path as a template's is (each puts its own there).
        self._folder = tempfile.mkdtemp(prefix="toolpipe-fork-server-")
        self._process = subprocess.Popen(  # our own module, by the interpreter running us
            [sys.executable, "-m", _SERVER_MODULE, str(theirs.fileno())],
            env=settings,
            cwd=self._folder,
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        theirs.close()

    def alive(self) -> bool:
        return self._connection.fileno() >= 0 and self._process.poll() is None

    def fork(
        self, environment: dict[str, str], folder: str, template: socket.socket
    ) -> tuple[int, int] | None:
        """A template forked with `template` as its socket to us: its pid and pidfd; None if the
        server could not (it is then closed: the next template gets a new one)."""
        request = json.dumps({"environment": environment, "folder": folder}).encode()
        if len(request) > REQUEST_LIMIT_BYTES:
            return None
        # The template writes where this process's stdout and stderr go now, as a child would.
        fds = [template.fileno(), *(fd if _is_open(fd) else _null() for fd in (1, 2))]
        with self._lock:
            if not self.alive():
                return None
            try:
                self._connection.settimeout(ANSWER_SECONDS)
                socket.send_fds(self._connection, [request], fds)
                answer, pidfds, _, _ = socket.recv_fds(self._connection, _PID.size, 1)
            except (OSError, ValueError):
                answer, pidfds = b"", []
            if len(answer) == _PID.size and len(pidfds) == 1:
                return _PID.unpack(answer)[0], pidfds[0]
            for fd in pidfds:
                os.close(fd)
            self.close()
            return None

    def close(self) -> None:
        """Its socket closed, the server ends (templates it forked go on until theirs close)."""
        self._connection.close()
        try:
            self._process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()
        call_runner.remove_tree(self._folder)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


_devnull: int | None = None


def _null() -> int:
    global _devnull
    if _devnull is None:
        _devnull = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    return _devnull


_server: _Server | None = None
_server_lock = threading.Lock()


def _server_for(environment: Mapping[str, str]) -> _Server:
    """The server for the template's settings, started (or replaced) if there is none."""
    global _server
    settings = {name: value for name, value in environment.items() if not name.startswith(_RUNNER_PREFIXES)}
    with _server_lock:
        if _server is not None and _server.owner != os.getpid():
            _server = None  # the parent's: never ours to use or end
        if _server is not None and (_server.settings != settings or not _server.alive()):
            _server.close()
            _server = None
        if _server is None:
            _server = _Server(settings)
        return _server


@atexit.register
def _close_server() -> None:
    with _server_lock:
        if _server is not None and _server.owner == os.getpid():
            _server.close()


# --- the server -------------------------------------------------------------------------------


def serve(fd: int) -> None:
    """The server's loop: a template forked for each request, until the runtime closes its socket."""
    _not_dumpable()
    connection = socket.socket(fileno=fd)
    base_path = sys.path[1:]  # less its own folder
    importlib.import_module(HOST_MODULE)  # what every template imports before the app
    import gc

    gc.freeze()  # what every template shares stays shared: the collector writes to none of it
    # Each request is read into this buffer, zeroed once its template is forked: a later
    # template inherits no earlier one's settings in this process's memory.
    buffer = bytearray(REQUEST_LIMIT_BYTES)
    while True:
        readable, _, _ = select.select([connection], [], [], 1.0)
        _reap()
        if not readable:
            continue
        try:
            size, fds = _received(connection, buffer)
        except OSError:
            return
        if not size:
            return  # the runtime is gone
        if len(fds) == 3:
            pid = os.fork()
            if pid == 0:
                _become_template(connection, bytes(buffer[:size]), fds, base_path)
        buffer[:size] = bytes(size)
        for fd_ in fds:
            os.close(fd_)
        if len(fds) != 3:
            continue
        pidfd = os.pidfd_open(pid)  # before any reaping here: the pid is still the child's
        try:
            socket.send_fds(connection, [_PID.pack(pid)], [pidfd])
        except OSError:
            return
        finally:
            os.close(pidfd)


def _received(connection: socket.socket, buffer: bytearray) -> tuple[int, list[int]]:
    """One request into `buffer` (`socket.recv_fds`, without a copy): its size and its fds."""
    size, ancillary, _, _ = connection.recvmsg_into([buffer], socket.CMSG_SPACE(3 * _FD.itemsize))
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return size, list(fds)


def _become_template(connection: socket.socket, request: bytes, fds: list[int], base_path: list[str]) -> None:
    """In the child: become the template a fresh `python -m tool_host FD` in the runner's folder
    with its environment would be (stdin empty, a session of its own), then serve its calls."""
    try:
        connection.close()
        os.setsid()
        asked = json.loads(request)
        template, out, err = fds
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in (null, out, err):
            os.close(fd)
        folder = str(asked["folder"])
        os.chdir(folder)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in asked["environment"].items()})
        sys.path[:] = [folder, *base_path]
        importlib.invalidate_caches()
        sys.argv = [str(sys.modules[HOST_MODULE].__file__), str(template)]
        from toolpipe.infra.local import tool_host

        tool_host.main(template)
    finally:
        os._exit(1)  # never back into the server's loop, whatever happened


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _not_dumpable() -> None:
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
