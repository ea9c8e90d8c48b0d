"""`python -m toolpipe.shared.runs.call_host FD`: a tool runner's template as a fresh interpreter.

Once the runner says it has its pid (`IMPORT_APP`), it imports the app (so each call's process,
forked from it, starts with it imported), says `ready` on the socket it was given, then serves calls (`call_process.serve`). An app that fails to
import does not stop it: each call then answers that failure, in one line, as the runner would.
"""

import contextlib
import importlib.util
import os
import socket
import sys

from toolpipe.shared.runs.call_process import guard_this_process, serve

# The script whose `__main__` module is the app (`LocalPipeline(app="__main__")` in a script): here
# it is imported as `__mp_main__` and stands for `__main__`, as multiprocessing does, so its
# `if __name__ == "__main__":` block does not run again.
MAIN_FILE_ENV = "TOOLPIPE_APP_MAIN_FILE"
# The runner's word that it has this template's pid (its AWS broker answers the runner's processes
# only, the app's import included): the template imports the app only then.
IMPORT_APP = b"i"


def _main_from_file(path: str) -> None:
    spec = importlib.util.spec_from_file_location("__mp_main__", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["__mp_main__"] = module
    spec.loader.exec_module(module)
    sys.modules["__main__"] = module


def prepare() -> None:
    """Import the app, as each call's process would: once, here."""
    from toolpipe.shared.agents import all_agents

    main_file = os.environ.get(MAIN_FILE_ENV)
    if main_file:
        with contextlib.suppress(Exception):  # each call says why, in its own answer
            _main_from_file(main_file)

    with contextlib.suppress(Exception):  # each call says why, in its own answer
        all_agents()


def main(fd: int) -> None:
    connection = socket.socket(fileno=fd)
    guard_this_process()  # before the app's import: no process of the user attaches meanwhile
    if connection.recv(1) != IMPORT_APP:
        return  # the runner gave up on this template before it had its pid: no app imported
    prepare()
    connection.sendall(b"ready")
    serve(connection)


if __name__ == "__main__":
    main(int(sys.argv[1]))
