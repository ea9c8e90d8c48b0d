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

The runner (`CallProcesses.run`, `call_runner.py`) hands the template the four pipes' ends over the socket
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
import signal
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import NoReturn

from toolpipe.shared.agents.app import loaded_version
from toolpipe.shared.errors import ErrorKind, describe_exception, error_text
from toolpipe.shared.runs.tool_run import ToolRunRequest, ToolRunResponse, run_tool_call

_TEMP_VARIABLES = ("TMPDIR", "TEMP", "TMP")
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
READ_SIZE = 65536
# The template's word that a spare took a call (or that none could), and how long the runner
# waits for it; a spare's that it has the call, the template's to go on, and how long and how
# many times the template tries a spare.
TAKEN = b"+"
NOT_TAKEN = b"-"
TAKEN_SECONDS = 15.0
_READY = b"r"
_GO = b"g"
SPARE_SECONDS = 3.0
# The runner's word that a call's supervisor ended before its call did (killed), and the
# template's that it ended what that call left, re-parented to it.
SWEEP = b"sweep:"
PID = struct.Struct(">I")
SWEPT = b"s"
SPARE_ATTEMPTS = 3
# What a fresh template runs: it imports the app, then serves.
HOST_MODULE = "toolpipe.shared.runs.call_host"


def guard_this_process() -> None:
    """The runner's own process on Lambda, and a template started as a fresh interpreter, before
    it imports the app: not dumpable (a call cannot read or write its memory, where earlier
    calls' requests and answers were) and the subreaper of what a call leaves
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


def has_children() -> bool:
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
        if not has_children():
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
            if message.startswith(SWEEP) and not fds:
                _sweep_after(message, supervisors)
                connection.sendall(SWEPT)
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
            runner.sendall(TAKEN + PID.pack(spare.pid))
            return spare
    runner.sendall(NOT_TAKEN)
    return spare


def _sweep_after(message: bytes, supervisors: set[int]) -> None:
    """A supervisor was killed: once it is collected (its children are re-parented here by then,
    not before: a process closes its files before its children move), end what it left."""
    pid = int(message[len(SWEEP) :] or 0)
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
        if not _fit(pid):
            done = -1  # not taken: the template hands the call to a fresh spare
            raise SystemExit(0)
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


def _fit(pid: int) -> bool:
    """Whether the call's process, forked before the call came, can still take it: a call that
    ran meanwhile may have killed or stopped it (any process of the same user may signal it).
    A stopped one is let go on; a dead one is not fit, and the spare is replaced."""
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGCONT)
    try:
        if os.waitpid(pid, os.WNOHANG)[0] != 0:
            return False
    except ChildProcessError:
        return False
    return not _dying(pid)


def _dying(pid: int) -> bool:
    """Whether `pid` was sent SIGKILL and has not run since to die of it (Linux's /proc).

    `kill` returns once the signal is pending; the process dies when it next runs, which on a
    busy machine can be after the next call came: it would take the call and die with it
    (1 of 12 times under two busy loops on 2 cores, before this check)."""
    kill = 1 << (signal.SIGKILL - 1)
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & kill:
                    return True
    except (OSError, ValueError, IndexError):
        return False  # no /proc: as before, `waitpid` alone
    return False


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
            content=error_text(f"the tool runner could not run the call: {describe_exception(e)}"),
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


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, READ_SIZE):
        chunks.append(chunk)
    return b"".join(chunks)
