"""Where a command finds the local server for a state folder, or starts one, and what the
serving process holds while it serves.

The state folder (`TOOLPIPE_HOME`, default `.toolpipe` in the project's root) holds two files for discovery:
- `server.lock`: the server holds an exclusive `fcntl.flock` on it for its whole life, state
  saved included. The lock is the truth (the kernel drops it when the process dies, however it
  dies); a second server for the same folder cannot take it and exits 2.
- `server.json`: `{"url", "pid", "started", "aws_endpoint"}`, written atomically once the server
  answers and removed when it starts to shut down. `aws_endpoint` is where the server answers the
  AWS APIs it emulates (`endpoint_url` for boto3, `--endpoint-url` for the aws CLI). Only an address: a file whose pid is dead or whose
  server does not answer is stale and ignored (the next server replaces it).

Standard library only, as `infra.local.client` (and `shared/project.py`, which finds the
project): a command that finds a server never loads moto.
"""

import contextlib
import errno
import fcntl
import json
import os
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from toolpipe.infra.local.client import LOG_FILE, STARTER_ENV, Client, ServerError
from toolpipe.shared.project import find_project

STATE_FOLDER = ".toolpipe"
SERVER_FILE = "server.json"
LOCK_FILE = "server.lock"
# A server started for a client's own duration stops this long after its last request ends
# (and no run is running): long enough for `toolpipe run` then `toolpipe show` to share it.
AUTO_IDLE_SECONDS = 1.0
START_TIMEOUT_SECONDS = 60.0  # the runtime starts in ~2-4 s here; a loaded CI machine is slower


def state_dir() -> Path:
    """The state folder this command works on: `TOOLPIPE_HOME`, else `.toolpipe` in the project's
    root (`shared/project.py`), else in the current folder.

    One project, one state: a command run from any of its subfolders finds the server and the
    runs of a command run from another.
    """
    home = os.environ.get("TOOLPIPE_HOME", "").strip()
    if home:
        # Absolute: a tool that changes the process's directory (`os.chdir`) must not move it.
        return Path(home).absolute()
    return project_root() / STATE_FOLDER


def project_root() -> Path:
    """The project's root (the current folder outside any project): where a server runs."""
    project = find_project()
    return project.root if project is not None else Path.cwd()


@dataclass(frozen=True)
class ServerInfo:
    """What `server.json` says about a running server."""

    url: str
    pid: int
    started: str
    aws_endpoint: str | None = None


def server_file(home: Path) -> Path:
    return home / SERVER_FILE


def lock_file(home: Path) -> Path:
    return home / LOCK_FILE


def try_lock(home: Path) -> int | None:
    """The folder's server lock as an open descriptor, or None when another process holds it."""
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_file(home), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


def lock_is_held(home: Path) -> bool:
    fd = try_lock(home)
    if fd is None:
        return True
    os.close(fd)  # closing the descriptor releases the lock
    return False


def write_server_file(home: Path, info: ServerInfo) -> None:
    # Atomic: a client reads either no file or a whole one, never half of it.
    tmp = home / f"{SERVER_FILE}.{os.getpid()}.tmp"
    fields = {"url": info.url, "pid": info.pid, "started": info.started, "aws_endpoint": info.aws_endpoint}
    tmp.write_text(json.dumps(fields))
    tmp.replace(server_file(home))


def remove_server_file(home: Path, pid: int) -> None:
    """Remove `server.json` if it is this server's (a newer server's file is left alone)."""
    info = read_server_file(home)
    if info is not None and info.pid == pid:
        with contextlib.suppress(FileNotFoundError):
            server_file(home).unlink()


def read_server_file(home: Path) -> ServerInfo | None:
    try:
        data = json.loads(server_file(home).read_text())
        aws = data.get("aws_endpoint")
        return ServerInfo(
            url=str(data["url"]),
            pid=int(data["pid"]),
            started=str(data["started"]),
            aws_endpoint=None if aws is None else str(aws),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, or not ours to read: treated as no server


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def live_server(home: Path) -> ServerInfo | None:
    """The server `server.json` names, if its process is alive (no request: it may be stopping,
    or not answer as itself)."""
    info = read_server_file(home)
    return info if info is not None and _alive(info.pid) else None


def discover(home: Path, starter: str | None = None) -> ServerInfo | None:
    """The server serving `home`, if `server.json` names one that is alive and answers as itself.
    `starter`: what a client that may have started it says to it (`connect`)."""
    info = live_server(home)
    if info is None:
        return None
    try:
        status, body = Client(info.url, timeout=5.0, starter=starter).health()
    except ServerError:
        return None
    if status != 200 or not isinstance(body, dict) or body.get("pid") != info.pid:
        return None  # a reused port or pid: not the server the file names
    return info


@dataclass
class Connection:
    """A client of a server that was found, or started for this client's own use (`child`)."""

    client: Client
    info: ServerInfo
    child: subprocess.Popen[bytes] | None = None
    released: bool = field(default=False, init=False)  # told once (`release`)

    def release(self) -> None:
        """Tell a server this client started that it is done with it, once: it then stops a
        quarter of a second after this client's last request rather than a second
        (serve_loop.py). One that stopped meanwhile has nothing to be told."""
        if self.child is None or self.released:
            return
        self.released = True
        if self.child.poll() is None:
            with contextlib.suppress(ServerError):
                self.client.release()

    def close(self, wait: float = 10.0) -> None:
        """Let a server this client started finish: released, it stops on its own once idle.

        Other clients may still be using it: then it is left running, and stops after them.
        """
        if self.child is None:
            return
        self.release()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.child.wait(timeout=wait)


def connect(
    home: Path,
    *,
    caller: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = START_TIMEOUT_SECONDS,
) -> Connection:
    """The server for `home`: the running one, or a new one started for this client's duration.

    Concurrent clients that find no server race to start one; the folder's lock lets exactly one
    win, and the others use it. A server that is shutting down still holds the lock until its
    state is saved: clients wait for it to go, then start a new one, which reads that state.

    Raises:
        ServerError: no server could be started or found within `timeout`.
    """
    deadline = time.monotonic() + timeout
    child: subprocess.Popen[bytes] | None = None
    log_offset = 0
    # What this client's requests carry to a server it starts: it alone may release that one.
    starter = secrets.token_hex(16)
    while True:
        info = discover(home, starter)
        if info is not None:
            mine = child if child is not None and child.pid == info.pid else None
            client = Client(info.url, caller=caller, starter=starter if mine else None)
            return Connection(client, info, mine)
        if child is not None and child.poll() is not None:
            if child.returncode != 2:
                raise ServerError(
                    f"the local server exited with {child.returncode} while starting; see {home / LOG_FILE}"
                )
            # Exit 2: it lost the race for the lock (another client's server is starting), or it
            # refused what it was given (a template AWS would refuse, say): that is the user's to
            # fix, in the one line it wrote, not a wait for a server that never comes.
            refused = _refusal(home, log_offset)
            if refused is not None and not refused.endswith(f" is already serving {home}"):
                raise ServerError(refused)
            child = None
        if child is None and not lock_is_held(home):
            log_offset = _log_size(home)
            child = _start_child(home, {**(env or {}), STARTER_ENV: starter})
        if time.monotonic() > deadline:
            if child is not None:
                child.terminate()
            raise ServerError(
                f"no local server answered for {home} within {timeout:g} s; see {home / LOG_FILE}"
            )
        # Waiting for another process's server to write server.json (or to release the lock).
        time.sleep(0.02)


def _log_size(home: Path) -> int:
    try:
        return (home / LOG_FILE).stat().st_size
    except OSError:
        return 0


def _refusal(home: Path, offset: int) -> str | None:
    """The last error line a server child wrote to the log (its stderr) after `offset`."""
    try:
        with (home / LOG_FILE).open("rb") as log:
            log.seek(offset)
            written = log.read().decode(errors="replace")
    except OSError:
        return None
    prefix = "toolpipe: error: "
    errors = [line[len(prefix) :] for line in written.splitlines() if line.startswith(prefix)]
    return errors[-1] if errors else None


def _start_child(home: Path, env: dict[str, str] | None) -> subprocess.Popen[bytes]:
    home.mkdir(parents=True, exist_ok=True)
    log = (home / LOG_FILE).open("ab")
    try:
        # Its own session: a Ctrl-C meant for this client must not stop a server other clients
        # share. Output goes to a file: a pipe nobody reads any more would block or kill it.
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "toolpipe.infra.cli",
                "serve",
                "--port",
                "0",
                "--idle-exit",
                f"{AUTO_IDLE_SECONDS:g}",
                "--for-client",
            ],
            env={**os.environ, **(env or {}), "TOOLPIPE_HOME": str(home)},
            # From the project's root, whichever subfolder this client runs in: the tools' relative
            # paths read the same for every client the server serves.
            cwd=project_root(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    finally:
        log.close()


def wait_stopping(home: Path, pid: int, deadline: float) -> None:
    """Wait, until `deadline` (monotonic), for the server `pid` to start stopping: its
    `server.json` gone or another's. Reads the file only: a request would keep it from idling."""
    while time.monotonic() < deadline:
        info = read_server_file(home)
        if info is None or info.pid != pid or not _alive(pid):
            return
        time.sleep(0.05)


def take_lock(home: Path) -> int | None:
    """The folder's server lock, waiting a moment for it; None when another process holds it."""
    # A client checking whether the lock is free holds it for an instant: try for a moment.
    deadline = time.monotonic() + 0.5
    while (lock := try_lock(home)) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return lock


def serving(home: Path) -> str:
    """Who holds `home`'s lock, as an error names it: "a toolpipe server[ at URL]"."""
    info = read_server_file(home)
    where = f" at {info.url}" if info else ""
    return f"a toolpipe server{where}"
