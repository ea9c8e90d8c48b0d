"""Where `toolpipe show` says a run's timeline page is: only where it stays served."""

from toolpipe.infra.cli.remote import RemoteSession
from toolpipe.infra.cli.session import LocalSession, page_url


class _Local(LocalSession):
    """A local session that found (or started) a server at `url`, without connecting."""

    def __init__(self, url: str, started: bool) -> None:
        self._url, self._started_it = url, started

    @property
    def url(self) -> str:
        return self._url

    @property
    def started_server(self) -> bool:
        return self._started_it

    def close(self) -> None:
        pass


def test_a_running_local_server_serves_the_page_under_its_stage() -> None:
    assert (
        page_url(_Local("http://127.0.0.1:8765", started=False), "r1")
        == "http://127.0.0.1:8765/v1/ui/runs/r1"
    )


def test_a_server_this_command_started_stops_with_it_so_no_page_is_named() -> None:
    assert page_url(_Local("http://127.0.0.1:8765", started=True), "r1") is None


def test_a_deployed_api_serves_it_under_its_stage_url() -> None:
    session = RemoteSession("https://abc123.execute-api.eu-west-1.amazonaws.com/v1/")
    assert page_url(session, "r-1") == "https://abc123.execute-api.eu-west-1.amazonaws.com/v1/ui/runs/r-1"
