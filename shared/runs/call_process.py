"""One tool call, one process: nothing a call leaves behind reaches another call.

The tool runner never runs tool code in its own process. Three kinds of process take part:

- the *template*: a process that has imported the app and never sees a call's data. It is
  forked from the runner's Lambda process at its cold start, before any invocation
  (`CallProcesses.forked`), or started as a fresh interpreter (`CallProcesses.spawned`: the
  local runtime, with the runner's environment only). It waits on a socket; for each call it
  forks a supervisor.
- the call's *supervisor*, forked from the template: it forks the call's process, waits for it
  up to the call's hard limit, then ends it and every process it started (the supervisor is their
  subreaper on Linux, so one that left its session or parent still ends), and says how the call
  ended.
- the call's *process*, forked from the supervisor: it reads the request from a pipe, runs the
  call (`run_tool_call`) in a folder of its own (its cwd and TMPDIR) and writes the answer to
  another pipe; its stdout and stderr go to a third, which the runner reads capped.

The runner (`CallProcesses.run`) hands the template the four pipes' ends over the socket
(SCM_RIGHTS) and writes the request itself: neither the template nor a supervisor ever holds
a call's request or answer, so a later call's process, forked from them, inherits no earlier
call's data. What a call patches, starts or sets ends with its process; its folder is removed
when it ends. Template and supervisors are not dumpable (Linux): a call cannot attach to them
(ptrace, /proc/PID/mem) to change what later calls run.
"""

import contextlib
import ctypes
import gc
import json
import os
import select
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import NoReturn

from toolpipe.shared.agents.app import loaded_version
from toolpipe.shared.errors import ErrorKind, describe_exception
from toolpipe.shared.runs.tool_run import ToolRunRequest, ToolRunResponse, run_tool_call

# What a call's stdout and stderr may leave in the runner's log; the rest is counted, not kept.
OUTPUT_LIMIT_BYTES = 64 * 1024
# An answer longer than this is refused (a Lambda response stops at 6 MB; longer ones go to S3).
ANSWER_LIMIT_BYTES = 64 * 1024 * 1024
# Past the call's own limit, what the runner waits for its supervisor to end it and clean up.
CLEANUP_SECONDS = 10.0
_TEMP_VARIABLES = ("TMPDIR", "TEMP", "TMP")
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_READ_SIZE = 65536
# The template's word that a spare took a call (or that none could), and how long the runner
# waits for it; a spare's that it has the call, the template's to go on, and how long and how
# many times the template tries a spare.
_TAKEN = b"+"
_NOT_TAKEN = b"-"
TAKEN_SECONDS = 15.0
_READY = b"r"
_GO = b"g"
SPARE_SECONDS = 3.0
# The runner's word that a call's supervisor ended before its call did (killed), and the
# template's that it ended what that call left, re-parented to it.
_SWEEP = b"sweep:"
_PID = struct.Struct(">I")
_SWEPT = b"s"
SPARE_ATTEMPTS = 3
# What a fresh template runs: it imports the app, then serves.
HOST_MODULE = "toolpipe.shared.runs.call_host"


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


def guard_this_process() -> None:
    """The runner's own process on Lambda: not dumpable (a call cannot read or write its memory,
    where earlier calls' requests and answers were) and the subreaper of what a call leaves
    (`CallProcesses.end_strays`)."""
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _children() -> list[int]:
    """This process's children, from /proc (empty where there is none: not Linux)."""
    me = os.getpid()
    try:  # the kernel's own list, where it keeps one (single-threaded: the main thread's)
        with open(f"/proc/{me}/task/{me}/children", "rb") as listed:
            return [int(pid) for pid in listed.read().split()]
    except OSError:
        pass
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue  # it ended while we looked
            if int(fields[1]) == me:
                found.append(int(entry.name))
    return found


def _has_children() -> bool:
    """Whether any child is left, reaping those that ended (cheaper than listing them)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def end_strays(keep: Collection[int] = ()) -> None:
    """End every child of this process but `keep`, and theirs: a process whose parent ends is
    re-parented here (the subreaper), so each round ends the next generation, until none is
    left."""
    for _ in range(1000):
        strays = [pid for pid in _children() if pid not in keep]
        if not strays:
            return
        for pid in strays:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)  # its own group, if it leads one
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in strays:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, 0)


def _end_children() -> None:
    """End every child of this process, and theirs (the cheap check first: most calls leave none)."""
    for _ in range(1000):
        if not _has_children():
            return
        end_strays()
        time.sleep(0.001)  # one may be between its parent's end and its re-parenting here


# --- the template ---------------------------------------------------------------------------


def serve(connection: socket.socket) -> NoReturn:
    """The template's loop: each call handed over `connection` goes to the spare supervisor
    (forked, with its call's process, before the call came: forking is off the call's path),
    and a new spare is forked; until `connection` closes."""
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)  # a call's process whose supervisor was killed comes here
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    gc.freeze()  # what every call's process shares stays shared: the collector writes to none of it
    supervisors: set[int] = set()
    connection.settimeout(1.0)
    try:
        spare = _Spare.fork(connection, supervisors)
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(connection, 4096, 4)
            except TimeoutError:
                _reap(supervisors)
                continue
            if not message:
                break  # the runner is gone
            if message.startswith(_SWEEP) and not fds:
                _sweep_after(message, supervisors)
                connection.sendall(_SWEPT)
                continue
            if len(fds) == 4:
                spare = _hand_over(connection, spare, message, fds, supervisors)
            for fd in fds:
                os.close(fd)  # before the next fork: a spare holding a call's pipe would keep it open
            if spare.connection.fileno() < 0:
                spare = _Spare.fork(connection, supervisors)
            _reap(supervisors)
    except BaseException:  # whatever ends the loop, the calls end with it
        pass
    _end_children()
    os._exit(0)


def _fork_connected(
    run: Callable[[socket.socket], NoReturn], above: socket.socket
) -> tuple[socket.socket, int]:
    """Fork a child that runs `run` on its end of a new socket pair, without `above` (this
    process's own socket upward, which is not the child's): our end, and its pid."""
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        above.close()
        ours.close()
        run(theirs)
    theirs.close()
    return ours, pid


@dataclass
class _Spare:
    """A supervisor and its call's process, forked before a call came, waiting for one."""

    connection: socket.socket
    pid: int

    @classmethod
    def fork(cls, template: socket.socket, supervisors: set[int]) -> "_Spare":
        ours, pid = _fork_connected(_supervise, template)
        supervisors.add(pid)
        return cls(ours, pid)

    def take(self, message: bytes, fds: list[int]) -> bool:
        """Hand it the call; True once it says it has it, and is told to go. A spare that does not
        answer in time (a call stopped or killed it) is ended before it passed the call on."""
        try:
            socket.send_fds(self.connection, [message], fds)
            self.connection.settimeout(SPARE_SECONDS)
            if self.connection.recv(1) == _READY:
                self.connection.sendall(_GO)
                return True
        except OSError:
            pass
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)  # its call's process is ended as an orphan
        return False


def _hand_over(
    runner: socket.socket, spare: _Spare, message: bytes, fds: list[int], supervisors: set[int]
) -> _Spare:
    """Pass a call to a spare (a fresh one if a call stopped the first), then tell the runner
    whether one took it: only then, so a call no spare took is answered as never run."""
    for attempt in range(SPARE_ATTEMPTS):
        if attempt:
            _reap(supervisors, orphans=True)
            spare = _Spare.fork(runner, supervisors)
        taken = spare.take(message, fds)
        spare.connection.close()
        if taken:
            runner.sendall(_TAKEN + _PID.pack(spare.pid))
            return spare
    runner.sendall(_NOT_TAKEN)
    return spare


def _sweep_after(message: bytes, supervisors: set[int]) -> None:
    """A supervisor was killed: once it is collected (its children are re-parented here by then,
    not before: a process closes its files before its children move), end what it left."""
    pid = int(message[len(_SWEEP) :] or 0)
    deadline = time.monotonic() + 2.0
    while pid in supervisors and time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                supervisors.discard(pid)
                break
        except ChildProcessError:
            supervisors.discard(pid)
            break
        time.sleep(0.002)
    _reap(supervisors, orphans=True)


def _reap(supervisors: set[int], orphans: bool = False) -> None:
    """Collect supervisors that ended; if one was killed, end what it left (re-parented here),
    round after round: a process re-parented here while the last round ended others is next."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        if pid in supervisors:
            supervisors.discard(pid)
            orphans |= not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)
    if orphans or any(pid not in supervisors for pid in _children()):
        end_strays(keep=supervisors)


# --- a call's supervisor ----------------------------------------------------------------------


def _supervise(template: socket.socket) -> NoReturn:
    """Fork the call's process, wait for the call, hand it over, end it and what it started."""
    ended: dict[str, object] = {"how": "lost"}
    done = pid = -1
    try:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        ours, pid = _fork_connected(_call, template)
        message, fds, _, _ = socket.recv_fds(template, 4096, 4)
        if not message or len(fds) != 4:
            raise SystemExit(0)  # the template is gone, or sent no call: end the spare
        request_in, answer_out, output_out, done = fds
        template.sendall(_READY)
        if template.recv(1) != _GO:
            done = -1  # the template gave the call to another spare: this one says nothing
            raise SystemExit(0)
        socket.send_fds(ours, [message], [request_in, answer_out, output_out])
        for fd in (request_in, answer_out, output_out):
            os.close(fd)
        ended = _wait(pid, float(str(json.loads(message)["seconds"])))
    except BaseException:  # the call's process is ended below whatever happened here
        pass
    finally:
        if pid > 0:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)  # what it started in its own group, at once
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)  # a spare that never got a call
        _end_children()
        if done >= 0:
            with contextlib.suppress(OSError):
                os.write(done, json.dumps(ended).encode())
        os._exit(0)


def _wait(pid: int, seconds: float) -> dict[str, object]:
    deadline = time.monotonic() + seconds
    pidfd = None
    with contextlib.suppress(OSError, AttributeError):
        pidfd = os.pidfd_open(pid)
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.WIFSIGNALED(status):
                    return {"how": "signaled", "code": os.WTERMSIG(status)}
                return {"how": "exited", "code": os.waitstatus_to_exitcode(status)}
            left = deadline - time.monotonic()
            if left <= 0:
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                return {"how": "overran"}
            if pidfd is not None:
                select.select([pidfd], [], [], left)
            else:
                time.sleep(min(left, 0.005))
    finally:
        if pidfd is not None:
            os.close(pidfd)


# --- a call's process -------------------------------------------------------------------------


def _call(supervisor: socket.socket) -> NoReturn:
    """A call's process: waits for its call, runs it, writes the answer, exits."""
    try:
        message, fds, _, _ = socket.recv_fds(supervisor, 4096, 3)
    except BaseException:
        os._exit(0)
    if not message or len(fds) != 3:
        os._exit(0)  # the supervisor is gone: no call came
    supervisor.close()
    request_in, answer_out, output_out = fds
    folder = str(json.loads(message)["folder"])
    answer = b""
    try:
        os.setsid()  # its own group: ended at once with everything it starts in it
        os.dup2(output_out, 1)
        os.dup2(output_out, 2)
        os.close(output_out)
        os.chdir(folder)
        for name in _TEMP_VARIABLES:
            os.environ[name] = folder
        tempfile.tempdir = folder
        request = ToolRunRequest.model_validate_json(_read_all(request_in))
        os.close(request_in)
        ran = run_tool_call(request).model_copy(update={"app_version": loaded_version()})
        answer = ran.model_dump_json().encode()
    except BaseException as e:  # the runner answers for a call that could not run
        failed = ToolRunResponse(
            content=f"Error: the tool runner could not run the call: {describe_exception(e)}",
            status="error",
            error_type=ErrorKind.TOOL_FAILED,
        )
        answer = failed.model_dump_json().encode()
    try:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        view = memoryview(answer)
        while view:
            view = view[os.write(answer_out, view) :]
    finally:
        os._exit(0)


def _exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the template closed its socket")
        data += chunk
    return data


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, _READ_SIZE):
        chunks.append(chunk)
    return b"".join(chunks)


# --- the runner's side ------------------------------------------------------------------------


class CallProcesses:
    """The runner's handle on its template: `run` runs one call in a process of its own."""

    def __init__(self, start: Callable[[], tuple[socket.socket, Callable[[], None], int]]) -> None:
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
        processes = cls(lambda: _spawn(dict(os.environ), None, HOST_MODULE))
        processes._connection, processes._stop, processes._pid = parent, lambda: _reap_pid(pid), pid
        return processes

    @classmethod
    def spawned(
        cls, environment: Mapping[str, str], cwd: str | None = None, host: str = HOST_MODULE
    ) -> "CallProcesses":
        """A template started (at the first call) as a fresh interpreter with `environment` only,
        running `python -m HOST FD` (a module that calls `call_host.main`)."""
        env = dict(environment)
        return cls(lambda: _spawn(env, cwd, host))

    def _sweep(self, supervisor: int) -> None:
        """Have the template end what a call whose supervisor was killed left behind; a
        template that does not answer is replaced (what it held ends with it)."""
        with self._lock:
            if self._connection is None:
                return
            try:
                self._connection.sendall(_SWEEP + str(supervisor).encode())
                self._connection.settimeout(TAKEN_SECONDS)
                if self._connection.recv(1) == _SWEPT:
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
                    if said == _TAKEN:
                        (supervisor,) = _PID.unpack(_exactly(self._connection, _PID.size))
                        self._calls[self._connection] = self._calls.get(self._connection, 0) + 1
                        return int(supervisor), self._connection
                    if said == _NOT_TAKEN:
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
            return pending[os.write(self.request_out, pending[:_READ_SIZE]) :]
        except BlockingIOError:
            return pending
        except BrokenPipeError:  # the call's process ended before reading it all
            return pending[:0]

    def _read(self, fd: int) -> bool:
        chunk = os.read(fd, _READ_SIZE)
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


def _spawn(
    environment: dict[str, str], cwd: str | None, host: str
) -> tuple[socket.socket, Callable[[], None], int]:
    """A fresh interpreter as the template (`python -m HOST FD`)."""
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
    ready = parent.recv(4096)  # the host says so once it has imported the app
    if ready != b"ready":
        parent.close()
        process.kill()
        process.wait()
        raise RunnerUnavailableError(ready.decode(errors="replace") or "the runner's template process ended")

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
