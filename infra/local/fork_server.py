"""Tool runners' templates forked from one prepared interpreter, not each started afresh.

A runner's template started as a fresh interpreter (`call_runner.spawn`) spends ~0.45 s of CPU
importing botocore, pydantic and toolpipe before it imports the app, and a process starts one
for every local runtime it brings up: a test process one per test that starts a runtime,
`toolpipe serve` one each time the app changes. The *fork server* is one interpreter that imports
those once (never the app) and then only forks: each template is a child of it that takes its
runner's environment, folder, `sys.path` and standard streams, then goes on as a fresh one does
(`tool_host`: it guards itself, sends its AWS calls to the runner's broker, imports the app).

What keeps a forked template what a fresh one is:
- The server's environment is only what the interpreter and the modules it imports read as
  they start (`_startup_settings`: `PYTHON*`, the locale, `HOME`, `PATH`, `TZ`, the proxies,
  pydantic's plugins, OpenSSL's),
  taken from the template's; a template whose differ gets a server started with its own. Every
  other variable (the runner's, the developer's, pytest's per-test one) is set in the child
  only. The server keeps no runner's settings or broker's path: each request is read into one
  buffer, zeroed once the template is forked.
- It never imports the app and never sees a call. What its templates share that fresh
  interpreters would not is what a template's calls already share: its hash seed and memory
  layout (`random` reseeds itself in every fork).
- It is not dumpable from before it imports anything of toolpipe's (`_BOOTSTRAP`), so a tool
  process of the same user cannot attach to it (ptrace, /proc/PID/mem) and change what later
  templates, of other runtimes, run; it runs in `/`, where a tool cannot put a module of its own
  first on its path. Its socket is the runtime's alone: each child closes it first.
- A template imports the app only once the runtime has its pid (`call_host.IMPORT_APP`, as a
  fresh one): the runtime's broker answers the runner's processes only, the app's import too.
- A server that does not answer within `ANSWER_SECONDS` (`START_SECONDS` while it starts), or has
  ended (a tool can signal it), is closed: the template starts afresh, the next one gets a new
  server. Where pidfds cannot be opened (not Linux, an older kernel, a seccomp profile that
  refuses them), every template starts afresh.
"""

import array
import atexit
import contextlib
import functools
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
import time
from collections.abc import Callable, Mapping

from toolpipe.shared.runs import call_process, call_runner

# A template forked, or the server's answer: how long the runtime waits for it; for the first
# answer of a server, which imports toolpipe first (~0.5 s, much more on a loaded machine).
ANSWER_SECONDS = 10.0
START_SECONDS = 120.0
# What one request may hold (the template's environment, as JSON), under what a socket's buffer
# takes in one message (212,992 bytes by default on Linux): a larger one starts afresh.
REQUEST_LIMIT_BYTES = 128 * 1024
# The server's answer when it could not open the template's pidfd.
_REFUSED = b"-"
_PID = struct.Struct(">I")
_FD = array.array("i")
# What the interpreter reads as it starts, and what a module reads as it is imported (urllib's
# proxies): a server's environment, the same as its templates'.
_STARTUP_PREFIXES = ("PYTHON", "LC_", "PYDANTIC_", "OPENSSL_", "SSL_CERT_")
_STARTUP_NAMES = frozenset({"LANG", "LANGUAGE", "HOME", "PATH", "TZ", "REQUEST_METHOD"})
HOST_MODULE = "toolpipe.infra.local.tool_host"
_SERVER_MODULE = "toolpipe.infra.local.fork_server"
# The server's command: not dumpable before anything else is imported, then this module's loop.
_BOOTSTRAP = (
    "import ctypes, runpy; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0);"  # PR_SET_DUMPABLE
    f" runpy.run_module({_SERVER_MODULE!r}, run_name='__main__')"
)


@functools.cache
def usable() -> bool:
    """Whether templates can be forked here: Linux, with pidfds this process may open."""
    if not sys.platform.startswith("linux") or not hasattr(signal, "pidfd_send_signal"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (OSError, AttributeError):
        return False
    return True


def start_template(environment: Mapping[str, str], started: Callable[[int], None]) -> call_runner.Template:
    """A runner's template with `environment` (what `call_runner.spawn` takes), forked from the
    fork server for its settings; started afresh where none can fork it."""
    env = dict(environment)
    # A request that could not be sent (`REQUEST_LIMIT_BYTES`, with room for the folder's path)
    # starts afresh before it could start or replace a server.
    if usable() and not _refused and len(json.dumps(env)) + 8192 <= REQUEST_LIMIT_BYTES:
        folder = tempfile.mkdtemp(prefix="toolpipe-runner-")
        ours, theirs = socket.socketpair()
        try:
            forked = _server_for(env).fork(env, folder, theirs)
        except OSError:  # no server could be started
            forked = None
        finally:
            theirs.close()
        if forked is not None:
            return _waited(ours, folder, *forked, started)
        _note_refusal()
        ours.close()  # a template forked all the same sees its socket end, and ends
        call_runner.remove_tree(folder)
    return call_runner.spawn(env, None, HOST_MODULE, started)


def _waited(
    connection: socket.socket, folder: str, pid: int, pidfd: int, started: Callable[[int], None]
) -> call_runner.Template:
    """The runtime's side of a forked template: as `call_runner.spawn`'s, waited on by its pidfd
    (it is the server's child, not ours)."""

    def stop() -> None:
        if not _ended(pidfd, 5.0):
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)  # its session's group: it leads it
            _ended(pidfd, None)
        # Ours to reap only where its server ended and we are the subreaper (PID 1 in a container).
        with contextlib.suppress(ChildProcessError, OSError, AttributeError):
            os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG)
        os.close(pidfd)
        call_runner.remove_tree(folder)

    try:
        problem = call_runner.readied(connection, pid, started)
    except BaseException:
        connection.close()
        stop()
        raise
    if problem is not None:
        connection.close()
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        stop()
        raise call_runner.RunnerUnavailableError(problem)
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
        self._answered = False
        self.refused = False  # pidfds refused in the server (a seccomp profile): never again
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._connection = ours
        try:
            self._process = subprocess.Popen(  # our own module, by the interpreter running us
                [sys.executable, "-c", _BOOTSTRAP, str(theirs.fileno())],
                env=settings,
                cwd="/",  # first on its sys.path (''): no tool can write there
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
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
                self._connection.settimeout(ANSWER_SECONDS if self._answered else START_SECONDS)
                socket.send_fds(self._connection, [request], fds)
                answer, pidfds, _, _ = socket.recv_fds(self._connection, _PID.size, 1)
            except (OSError, ValueError):
                answer, pidfds = b"", []
            if len(answer) == _PID.size and len(pidfds) == 1:
                self._answered = True
                return _PID.unpack(answer)[0], pidfds[0]
            if answer == _REFUSED:
                self.refused = True
            for fd in pidfds:
                os.close(fd)
            self.close()
            return None

    def close(self) -> None:
        """Its socket closed, the server ends (templates it forked go on until theirs close)."""
        with contextlib.suppress(OSError):  # wakes a thread waiting on its answer
            self._connection.shutdown(socket.SHUT_RDWR)
        self._connection.close()
        try:
            self._process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()


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
_refused = False


def _note_refusal() -> None:
    global _refused
    with _server_lock:
        _refused = _refused or (_server is not None and _server.refused)


def _startup_settings(environment: Mapping[str, str]) -> dict[str, str]:
    """What of a template's environment its server must have been started with (see
    `_STARTUP_PREFIXES`); never a `TOOLPIPE_` or `AWS_` variable."""
    return {
        name: value
        for name, value in environment.items()
        if (name.startswith(_STARTUP_PREFIXES) or name in _STARTUP_NAMES or name.lower().endswith("_proxy"))
        and not name.startswith(("TOOLPIPE_", "AWS_"))
    }


def _server_for(environment: Mapping[str, str]) -> _Server:
    """The server for the template's settings, started (or replaced) if there is none."""
    global _server
    settings = _startup_settings(environment)
    with _server_lock:
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


def _forget_in_child() -> None:
    """A process forked from this one: the server is the parent's, and so is its socket (which,
    held open here, would keep the server from ending with the parent); the lock is new."""
    global _server, _server_lock
    if _server is not None:
        with contextlib.suppress(OSError):
            os.close(_server._connection.detach())
    _server, _server_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


# --- the server -------------------------------------------------------------------------------


def serve(fd: int) -> None:
    """The server's loop: a template forked for each request, until the runtime closes its socket."""
    connection = socket.socket(fileno=fd)
    # Less its own folder ('': `/`), unless it has none there (PYTHONSAFEPATH).
    base_path = sys.path[:] if sys.flags.safe_path else sys.path[1:]
    importlib.import_module(HOST_MODULE)  # what every template imports before the app
    import gc

    gc.freeze()  # what every template shares stays shared: the collector writes to none of it
    # Each request is read into this buffer, zeroed once its template is forked: a later
    # template inherits no earlier one's settings in this process's memory.
    buffer = bytearray(REQUEST_LIMIT_BYTES)
    while True:
        readable, _, _ = select.select([connection], [], [], 1.0)
        call_process.has_children()  # reaps the templates that ended
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
        try:
            pidfd = os.pidfd_open(pid)  # before any reaping here: the pid is still the child's
        except OSError:  # refused: the runtime, answered nothing, closes the template's socket
            try:
                connection.sendall(_REFUSED)
            except OSError:
                return
            continue
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
        time.tzset()  # read as `time` was imported: the template's own, should it differ
        sys.path[:] = [*([] if sys.flags.safe_path else [folder]), *base_path]  # as `-m` puts it
        importlib.invalidate_caches()
        sys.argv = [str(sys.modules[HOST_MODULE].__file__), str(template)]
        from toolpipe.infra.local import tool_host

        tool_host.main(template)
    finally:
        os._exit(1)  # never back into the server's loop, whatever happened


if __name__ == "__main__":
    serve(int(sys.argv[1]))
