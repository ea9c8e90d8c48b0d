"""`python -m toolpipe.shared.runs.call_host FD`: a tool runner's template as a fresh interpreter.

It imports the app (so each call's process, forked from it, starts with it imported), says
`ready` on the socket it was given, then serves calls (`call_process.serve`). An app that fails to
import does not stop it: each call then answers that failure, in one line, as the runner would.
"""

import contextlib
import socket
import sys

from toolpipe.shared.runs.call_process import serve


def prepare() -> None:
    """Import the app, as each call's process would: once, here."""
    from toolpipe.shared.agents import all_agents

    with contextlib.suppress(Exception):  # each call says why, in its own answer
        all_agents()


def main(fd: int) -> None:
    connection = socket.socket(fileno=fd)
    prepare()
    connection.sendall(b"ready")
    serve(connection)


if __name__ == "__main__":
    main(int(sys.argv[1]))
