"""A server a command started stops soon after that command releases it (`POST
/_local/release`), not a whole idle exit later, unless another client's request or the AWS
endpoint still uses it. A server a person started has no such route."""

import threading
from collections.abc import Iterator

import pytest

from tests.conftest import Pipeline, _pipeline
from toolpipe.infra.local.client import RELEASE_PATH, Client
from toolpipe.infra.local.serve_loop import RELEASED_IDLE_SECONDS, serve_until_stopped
from toolpipe.infra.local.server import LocalServer

# Far longer than any test here waits: a server that stops did so because it was released.
IDLE_EXIT = 120.0
STARTER = "the-command-that-started-it"


class Endpoint:
    """Stands in for the AWS endpoint: idle for as long as a test says."""

    def __init__(self) -> None:
        self.idle = IDLE_EXIT

    def idle_seconds(self) -> float:
        return self.idle


@pytest.fixture
def served() -> Iterator[tuple[Pipeline, LocalServer, Endpoint, threading.Thread]]:
    for pipeline in _pipeline():
        endpoint = Endpoint()
        with LocalServer(pipeline.runtime, starter=STARTER) as server:
            stop = threading.Event()
            loop = threading.Thread(
                target=serve_until_stopped,
                args=(pipeline.runtime, server, stop, threading.Event(), IDLE_EXIT),
                kwargs={"also_serving": [endpoint]},
                daemon=True,
            )
            loop.start()
            try:
                yield pipeline, server, endpoint, loop
            finally:
                stop.set()
                loop.join(30)


def test_a_released_server_stops_soon_after_its_last_request(
    served: tuple[Pipeline, LocalServer, Endpoint, threading.Thread],
) -> None:
    pipeline, server, _, loop = served
    run_id = pipeline.start("What is the square root of 16?", agent="assistant")
    pipeline.finish(run_id)
    loop.join(3 * RELEASED_IDLE_SECONDS)
    assert loop.is_alive()  # not released: it waits out its idle exit

    assert Client(server.url, starter=STARTER).release() == (200, {"released": True})
    loop.join(30)
    assert not loop.is_alive()
    assert server.draining.is_set()


def test_the_aws_endpoint_in_use_keeps_a_released_server_up(
    served: tuple[Pipeline, LocalServer, Endpoint, threading.Thread],
) -> None:
    _, server, endpoint, loop = served
    endpoint.idle = 0.0  # a tool or a script is using it
    assert Client(server.url, starter=STARTER).release()[0] == 200
    loop.join(3 * RELEASED_IDLE_SECONDS + 0.5)
    assert loop.is_alive()

    endpoint.idle = IDLE_EXIT  # its last request long ago
    loop.join(30)
    assert not loop.is_alive()


def test_another_client_gets_the_whole_idle_exit_after_its_last_request(
    served: tuple[Pipeline, LocalServer, Endpoint, threading.Thread],
) -> None:
    _, server, _, loop = served
    assert Client(server.url).health()[0] == 200  # a command that found the server meanwhile
    assert Client(server.url, starter=STARTER).release()[0] == 200
    loop.join(3 * RELEASED_IDLE_SECONDS + 0.5)
    assert loop.is_alive()  # it waits out its idle exit after that command's request


def test_only_the_command_that_started_a_server_releases_it_with_a_post() -> None:
    for pipeline in _pipeline():
        with LocalServer(pipeline.runtime, starter=STARTER) as server:
            status, body = Client(server.url, starter=STARTER)._send("GET", RELEASE_PATH, None)
            assert status == 405 and body["message"] == f"GET not allowed: POST {RELEASE_PATH}"
            for other in (None, "another-command", ""):
                status, body = Client(server.url, starter=other).release()
                assert status == 404 and body["message"].startswith("not found"), other
            assert not server.released.is_set()
        # One a person started keeps the idle exit they asked for: nobody can shorten it.
        with LocalServer(pipeline.runtime) as server:
            for other in (None, STARTER):
                assert Client(server.url, starter=other).release()[0] == 404
            assert not server.released.is_set()
