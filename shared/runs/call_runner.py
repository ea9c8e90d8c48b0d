"""The runner's side of a call in a process of its own (`call_process.py` has the template, the
supervisor and the call's process): `CallProcesses` hands each call's pipes to the template,
writes the request, reads the answer, the output and how the call ended; and which template
each runner function uses outside Lambda.
"""

import contextlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from toolpipe.shared.errors import describe_exception
from toolpipe.shared.runs.call_host import IMPORT_APP
from toolpipe.shared.runs.call_process import (
    HOST_MODULE,
    NOT_TAKEN,
    PID,
    READ_SIZE,
    SWEEP,
    SWEPT,
    TAKEN,
    TAKEN_SECONDS,
    end_strays,
    serve,
)
from toolpipe.shared.runs.tool_run import ToolRunRequest, ToolRunResponse

# What a call's stdout and stderr may leave in the runner's log; the rest is counted, not kept.
OUTPUT_LIMIT_BYTES = 64 * 1024
# An answer longer than this is refused (a Lambda response stops at 6 MB; longer ones go to S3).
ANSWER_LIMIT_BYTES = 64 * 1024 * 1024
# Past the call's own limit, what the runner waits for its supervisor to end it and clean up.
CLEANUP_SECONDS = 10.0
# A started template: the runner's socket to it, what ends it, its pid.
Template = tuple[socket.socket, Callable[[], None], int]


@dataclass(frozen=True)
class CallEnd:
    """How a call's process ended, as its supervisor saw it."""

    how: str  # "exited", "signaled", "overran", "lost" (its supervisor died first)
    code: int = 0
    # What the call wrote to stdout and stderr, at most OUTPUT_LIMIT_BYTES of it.
    output: bytes = b""
    output_bytes: int = 0

    def describe(self) -> str:
        if self.how == "exited":
            return f"its process exited with status {self.code} before answering"
        if self.how == "signaled":
            name = signal.Signals(self.code).name if self.code in signal.Signals._value2member_map_ else ""
            return f"its process was killed by signal {self.code} {name}".rstrip() + " (out of memory?)"
        if self.how == "too_long":
            return f"its answer was {self.code:,} bytes, over the runner's {ANSWER_LIMIT_BYTES:,}"
        if self.how == "overran":
            return "its process ran past the call's time limit and was ended"
        return "its process was lost (its supervisor ended first)"


class RunnerUnavailableError(RuntimeError):
    """The template process cannot take a call (it ended): nothing of the call ran."""


class CallProcesses:
    """The runner's handle on its template: `run` runs one call in a process of its own."""

    def __init__(self, start: Callable[[], Template]) -> None:
        self._start = start
        self._lock = threading.Lock()
        self._connection: socket.socket | None = None
        self._stop: Callable[[], None] | None = None
        self._pid = 0  # the template's
        # Calls in progress, by the template connection that took them; a renewed template's
        # connection and stop, kept until its last call ends.
        self._calls: dict[socket.socket, int] = {}
        self._retired: dict[socket.socket, Callable[[], None] | None] = {}
        self._closed = False
        # Every template it started: a call of an earlier one may still run (and call AWS).
        self._started: set[int] = set()

    @classmethod
    def forked(cls, then: Callable[[], None] | None = None) -> "CallProcesses":
        """A template forked from this process now (a Lambda cold start, before any invocation),
        which runs `then` (importing the app) before it serves. Should it end, the next is a fresh
        interpreter: this process has held calls' data since."""
        parent, child = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            parent.close()
            if then is not None:
                with contextlib.suppress(BaseException):
                    then()
            serve(child)
        child.close()
        processes = cls(lambda: spawn(dict(os.environ), None, HOST_MODULE, processes._started.add))
        processes._connection, processes._stop, processes._pid = parent, lambda: _reap_pid(pid), pid
        processes._started.add(pid)
        return processes

    @classmethod
    def spawned(
        cls, environment: Mapping[str, str], cwd: str | None = None, host: str = HOST_MODULE
    ) -> "CallProcesses":
        """A template started (at the first call) as a fresh interpreter with `environment` only,
        running `python -m HOST FD` (a module that calls `call_host.main`)."""
        env = dict(environment)
        return cls.started_by(lambda started: spawn(env, cwd, host, started))

    @classmethod
    def started_by(cls, start: Callable[[Callable[[int], None]], Template]) -> "CallProcesses":
        """A template started (at the first call) by `start`, which is given what to tell each
        template's pid before it imports the app (as `spawn`): its socket, its stop and pid."""
        processes = cls(lambda: start(processes._started.add))
        return processes

    def holds(self, pid: int) -> bool:
        """Whether process `pid` is a template of these or runs under one (a call's process and
        what it started: a template is the subreaper of all of them)."""
        return _descends(pid, self._started)

    def _sweep(self, supervisor: int) -> None:
        """Have the template end what a call whose supervisor was killed left behind; a
        template that does not answer is replaced (what it held ends with it)."""
        with self._lock:
            if self._connection is None:
                return
            try:
                self._connection.sendall(SWEEP + str(supervisor).encode())
                self._connection.settimeout(TAKEN_SECONDS)
                if self._connection.recv(1) == SWEPT:
                    return
            except OSError:
                pass
            self._connection.close()
            self._connection = None
            if self._stop is not None:
                self._stop()
                self._stop = None

    def end_strays(self) -> None:
        """End every child of this process but the template, and theirs (`guard_this_process`
        made this process their subreaper): what a call that killed its supervisor and the
        template left. Only where this process starts no other child: the runner on Lambda."""
        end_strays(keep={self._pid})

    def close(self) -> None:
        """End the template and every call still running."""
        with self._lock:
            self._closed = True  # a template being started after a renewal is not started
            if self._connection is not None:
                self._connection.close()
                self._connection = None
            if self._stop is not None:
                self._stop()
                self._stop = None
            for connection, stop in self._retired.items():
                connection.close()
                if stop is not None:
                    stop()
            self._retired.clear()

    def renew(self) -> None:
        """The next call runs in a new template (the app changed: it imports it anew), started
        now, off the call's path; the one there is ends once the calls it runs have ended, with
        the code they started with."""
        with self._lock:
            connection, stop = self._connection, self._stop
            self._connection, self._stop, self._pid = None, None, 0
            if connection is None:
                return  # no call came yet: the first one starts it, as before
            if self._calls.get(connection):
                self._retired[connection] = stop
                connection = None
        if connection is not None:
            connection.close()
            if stop is not None:
                stop()
        threading.Thread(target=self._warm, name="template-start", daemon=True).start()

    def _warm(self) -> None:
        with self._lock:
            if self._connection is not None or self._closed:
                return
            # Should it fail, the next call starts one, and says why it could not.
            with contextlib.suppress(RunnerUnavailableError, OSError):
                self._connection, self._stop, self._pid = self._start()

    def _call_ended(self, connection: socket.socket) -> None:
        with self._lock:
            self._calls[connection] -= 1
            if self._calls[connection]:
                return
            del self._calls[connection]
            if connection not in self._retired:
                return
            stop = self._retired.pop(connection)
        connection.close()
        if stop is not None:
            stop()

    def _handed(self, header: bytes, fds: list[int]) -> tuple[int, socket.socket]:
        """Hand the call's pipes to the template, which says it took them before it passes them
        on: a template that ended (a call killed it, it ran out of memory) took nothing, and a
        new one is started for the call; one that ends after saying so has the call lost, never
        run twice."""
        with self._lock:
            for attempt in range(2):
                if self._connection is None:
                    self._connection, self._stop, self._pid = self._start()
                try:
                    socket.send_fds(self._connection, [header], fds)
                    self._connection.settimeout(TAKEN_SECONDS)
                    said = self._connection.recv(1)
                    if said == TAKEN:
                        (supervisor,) = PID.unpack(_exactly(self._connection, PID.size))
                        self._calls[self._connection] = self._calls.get(self._connection, 0) + 1
                        return int(supervisor), self._connection
                    if said == NOT_TAKEN:
                        raise RunnerUnavailableError(
                            "no process of the runner took the call (a call stopped them?)"
                        )
                    problem = "it closed its socket"
                except OSError as e:
                    problem = describe_exception(e)
                self._connection.close()
                self._connection = None
                if self._stop is not None:
                    self._stop()
                    self._stop = None
                if attempt == 1:
                    raise RunnerUnavailableError(f"the runner's template process ended ({problem})")
        raise AssertionError("unreachable")  # the loop returns or raises

    def run(self, request: ToolRunRequest, seconds: float) -> tuple[ToolRunResponse | None, CallEnd]:
        """Run the call in a process of its own, ended (with what it started) after `seconds`.
        The answer, or None when the process ended without one, and how it ended."""
        folder = tempfile.mkdtemp(prefix="toolpipe-call-")
        request_in, request_out = os.pipe()
        answer_in, answer_out = os.pipe()
        output_in, output_out = os.pipe()
        done_in, done_out = os.pipe()
        exchange = _Exchange(request_out, answer_in, output_in, done_in)
        try:
            header = json.dumps({"folder": folder, "seconds": seconds}).encode()
            theirs = [request_in, answer_out, output_out, done_out]
            try:
                supervisor, template = self._handed(header, theirs)
            finally:
                for fd in theirs:
                    os.close(fd)
            try:
                exchange.run(request.model_dump_json().encode(), seconds + CLEANUP_SECONDS)
            finally:
                self._call_ended(template)
        finally:
            exchange.close()
            remove_tree(folder)
        output = bytes(exchange.output)
        try:
            ended = json.loads(bytes(exchange.done))
            end = CallEnd(str(ended["how"]), int(ended.get("code", 0)), output, exchange.output_bytes)
        except (ValueError, KeyError, TypeError):
            end = CallEnd("lost", 0, output, exchange.output_bytes)
        if end.how == "lost":
            self._sweep(supervisor)  # before the answer: nothing of this call may run on past it
        if exchange.answer_bytes > ANSWER_LIMIT_BYTES and end.how == "exited":
            end = CallEnd("too_long", exchange.answer_bytes, output, exchange.output_bytes)
        if not exchange.answer or end.how in ("overran", "too_long"):
            return None, end
        try:
            return ToolRunResponse.model_validate_json(bytes(exchange.answer)), end
        except ValueError:
            return None, end


@dataclass
class _Exchange:
    """The runner's side of one call's pipes: it writes the request and reads the answer, the
    output and the end at once (a pipe holds 64 KiB: a process writing one while we wait on
    another would stop), until the supervisor says the call ended, or time runs out."""

    request_out: int
    answer_in: int
    output_in: int
    done_in: int
    answer: bytearray = field(default_factory=bytearray)
    answer_bytes: int = 0
    output: bytearray = field(default_factory=bytearray)
    output_bytes: int = 0
    done: bytearray = field(default_factory=bytearray)

    def run(self, request: bytes, seconds: float) -> None:
        pending = memoryview(request)
        deadline = time.monotonic() + seconds
        with selectors.DefaultSelector() as selector:
            os.set_blocking(self.request_out, False)
            selector.register(self.request_out, selectors.EVENT_WRITE)
            for fd in (self.answer_in, self.output_in, self.done_in):
                selector.register(fd, selectors.EVENT_READ)
            reading = {self.answer_in, self.done_in}
            while reading and (left := deadline - time.monotonic()) > 0:
                for key, _ in selector.select(left):
                    fd = int(key.fd)
                    if fd == self.request_out:
                        pending = self._write(pending)
                        if not pending:
                            selector.unregister(fd)
                            os.close(fd)  # the call's process reads the request to its end
                            self.request_out = -1
                    elif not self._read(fd):
                        selector.unregister(fd)
                        reading.discard(fd)

    def close(self) -> None:
        for fd in (self.request_out, self.answer_in, self.output_in, self.done_in):
            if fd >= 0:
                os.close(fd)

    def _write(self, pending: memoryview) -> memoryview:
        try:
            return pending[os.write(self.request_out, pending[:READ_SIZE]) :]
        except BlockingIOError:
            return pending
        except BrokenPipeError:  # the call's process ended before reading it all
            return pending[:0]

    def _read(self, fd: int) -> bool:
        chunk = os.read(fd, READ_SIZE)
        if fd == self.answer_in:
            self.answer_bytes += len(chunk)
            if self.answer_bytes <= ANSWER_LIMIT_BYTES:
                self.answer += chunk
        elif fd == self.output_in:
            if self.output_bytes < OUTPUT_LIMIT_BYTES:
                self.output += chunk[: OUTPUT_LIMIT_BYTES - self.output_bytes]
            self.output_bytes += len(chunk)
        else:
            self.done += chunk
        return bool(chunk)


def _descends(pid: int, ancestors: Collection[int]) -> bool:
    """Whether `pid` is one of `ancestors` or a descendant of one, from /proc's parent links."""
    for _ in range(256):  # deeper than any process tree a call could build before its end
        if pid in ancestors:
            return True
        if pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                pid = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def spawn(
    environment: dict[str, str], cwd: str | None, host: str, started: Callable[[int], None]
) -> Template:
    """A fresh interpreter as the template (`python -m HOST FD`); `started` is told its pid
    before it imports the app (whose import may call AWS already)."""
    parent, child = socket.socketpair()
    folder = cwd or tempfile.mkdtemp(prefix="toolpipe-runner-")
    process = subprocess.Popen(  # our own module, by the interpreter running us
        [sys.executable, "-m", host, str(child.fileno())],
        env=environment,
        cwd=folder,
        pass_fds=[child.fileno()],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    child.close()
    problem = readied(parent, process.pid, started)
    if problem is not None:
        parent.close()
        process.kill()
        process.wait()
        raise RunnerUnavailableError(problem)

    def stop() -> None:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if cwd is None:
            remove_tree(folder)

    return parent, stop, process.pid


def readied(connection: socket.socket, pid: int, started: Callable[[int], None]) -> str | None:
    """Tell `started` a new template's pid, then let it import the app (`IMPORT_APP`: the broker
    answers the runner's processes only, the app's import included): None once it says it is
    ready, else why it is not."""
    try:
        started(pid)
        connection.sendall(IMPORT_APP)
        ready = connection.recv(4096)  # the host says so once it has imported the app
    except OSError:
        ready = b""
    if ready == b"ready":
        return None
    return ready.decode(errors="replace") or "the runner's template process ended"


def remove_tree(path: str) -> None:
    """Remove a folder a call had, whatever it did to it: a folder it made unreadable
    (`chmod 000`) is made ours again first, links never followed."""
    for _ in range(10):
        if not os.path.lexists(path):
            return
        if not os.path.islink(path):
            with contextlib.suppress(OSError):
                os.chmod(path, 0o700)
            for root, folders, _ in os.walk(path):  # top-down: each is opened after this
                for name in folders:
                    inner = os.path.join(root, name)
                    if not os.path.islink(inner):
                        with contextlib.suppress(OSError):
                            os.chmod(inner, 0o700)
        shutil.rmtree(path, ignore_errors=True)
        if os.path.islink(path):
            with contextlib.suppress(OSError):
                os.unlink(path)


def _reap_pid(pid: int) -> None:
    """Wait for a forked template to end (it ends its calls first), at most 5 s, then end it."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.01)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, 0)


# --- which template a runner function uses, outside Lambda ------------------------------------

_by_function: dict[str, CallProcesses] = {}
_registry_lock = threading.Lock()


def register(function_name: str, processes: CallProcesses) -> None:
    """The local runtime names the template of one of its runner functions."""
    with _registry_lock:
        _by_function[function_name] = processes


def unregister(function_name: str) -> CallProcesses | None:
    with _registry_lock:
        return _by_function.pop(function_name, None)


def for_function(function_name: str) -> CallProcesses:
    """The template registered for the function; for a handler called with no runtime around it
    (a test of its own), one spawned with this process's environment, kept for the process."""
    with _registry_lock:
        processes = _by_function.get(function_name)
        if processes is None:
            processes = _by_function[function_name] = CallProcesses.spawned(dict(os.environ))
        return processes


def _exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the template closed its socket")
        data += chunk
    return data
