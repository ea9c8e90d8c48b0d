"""A socketserver's serving loop woken to stop, rather than polled for it.

`serve_forever(poll_interval)` reads its stop flag only when it wakes: for a connection, or when
its poll runs out. Polled every 0.05 s (so that a stop took no longer), each idle server of a
`toolpipe serve` woke 20 times a second, ~1 ms of CPU a second each. Here the loop polls
rarely, and `stop` wakes it with a connection.
"""

import contextlib
import socket
import threading
from socketserver import BaseServer

# How often an idle serving loop wakes: a backstop only, as `stop` wakes it.
POLL_SECONDS = 30.0


def stop(server: BaseServer, serving: threading.Thread) -> None:
    """`server.shutdown()`, its loop (run by `serving`) woken by a connection rather than its
    next poll. A connection made before the loop reads the stop is served and missed it: one is
    made again until the loop has stopped."""
    if not serving.is_alive():
        return  # never started, or stopped: shutdown() would wait for a loop that is not there
    stopping = threading.Thread(target=server.shutdown, name=f"{serving.name}-stop", daemon=True)
    stopping.start()
    address = server.server_address
    assert isinstance(address, tuple), address  # an inet server's (host, port[, ...])
    host, port = address[:2]
    while stopping.is_alive():
        with contextlib.suppress(OSError):  # the listener already closed, or busy: tried again
            socket.create_connection((str(host), int(port)), timeout=1).close()
        stopping.join(0.05)
