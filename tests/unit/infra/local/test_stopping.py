"""A local server's serving loop is woken to stop (infra/local/stopping.py): it polls every
30 s, and a stop still takes a moment, not a poll."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from toolpipe.infra.local import stopping


def test_a_server_stops_at_once_though_its_loop_polls_rarely() -> None:
    for _ in range(5):  # a stop racing the loop's start, too
        server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
        serving = threading.Thread(target=server.serve_forever, args=(stopping.POLL_SECONDS,), daemon=True)
        serving.start()
        started = time.monotonic()
        stopping.stop(server, serving)
        serving.join(5)
        server.server_close()
        assert not serving.is_alive() and time.monotonic() - started < 5


def test_a_server_never_started_is_stopped_without_waiting() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    started = time.monotonic()
    stopping.stop(server, threading.Thread(target=server.serve_forever))
    server.server_close()
    assert time.monotonic() - started < 1
