"""The CLI refuses bad arguments before it starts anything, and never sends a POST twice."""

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from toolpipe.infra import cli
from toolpipe.infra.local import client


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "hi", "--timeout", "nan"],
        ["run", "hi", "--timeout", "-1"],
        ["run", "hi", "--timeout", "4000"],
        ["show", "a b"],
        ["show", "x/messages"],
        ["show", ""],
        ["serve", "--port", "70000"],
        ["serve", "--aws-port", "-1"],
    ],
)
def test_bad_arguments_exit_2_and_start_nothing(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path))
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2 and list(tmp_path.iterdir()) == []


def test_a_post_that_may_have_reached_the_server_is_not_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []

    class Lost:
        def request(self, method: str, path: str, body: Any) -> Any:
            sent.append(method)
            raise client.ServerError("lost the local server: timed out")

    monkeypatch.setattr(client, "connect", lambda home, env=None: SimpleNamespace(client=Lost(), child=None))
    session = cli._Session(tmp_path)

    with pytest.raises(client.ServerError):
        session.request("POST", "/runs", {"prompt": "hi"})
    assert sent == ["POST"]  # it may have started a run: never a second one
    with pytest.raises(client.ServerError):
        session.request("GET", "/runs/x")
    assert sent.count("GET") == cli._Session.ATTEMPTS  # reads are safe to repeat


def test_serve_on_a_taken_port_says_so_at_once_and_resumes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import socket
    import time

    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path))
    # serve sets this for its own process: the test's process gets it back as it was.
    monkeypatch.setenv("TOOLPIPE_ALLOW_RUN_MCP_SERVERS", "")
    monkeypatch.delenv("TOOLPIPE_ALLOW_RUN_MCP_SERVERS")
    taken = socket.create_server(("127.0.0.1", 0))
    out = io.StringIO()
    started = time.monotonic()
    try:
        code = cli.main(["serve", "--port", str(taken.getsockname()[1])], out=out)
    finally:
        taken.close()
    assert code == 1 and time.monotonic() - started < 2
    assert (
        out.getvalue().startswith("error: cannot serve on 127.0.0.1:")
        and "Address already in use" in out.getvalue()
    )
    assert not (tmp_path / "state.json").exists()  # the runtime never started


def test_serve_on_a_taken_aws_port_names_the_option_and_resumes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import socket

    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path))
    monkeypatch.setenv("TOOLPIPE_ALLOW_RUN_MCP_SERVERS", "")
    monkeypatch.delenv("TOOLPIPE_ALLOW_RUN_MCP_SERVERS")
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    out = io.StringIO()
    try:
        code = cli.main(["serve", "--port", "0", "--aws-port", str(port)], out=out)
    finally:
        taken.close()
    assert code == 1
    message = out.getvalue()
    assert (
        message.startswith(f"error: cannot serve on 127.0.0.1:{port}: ")
        and "Address already in use" in message
    )
    assert message.endswith("(--aws-port 0 picks a free one)\n")
    assert not (tmp_path / "state.json").exists()


def test_serve_refuses_one_port_for_the_api_and_the_aws_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path))
    monkeypatch.setenv("TOOLPIPE_ALLOW_RUN_MCP_SERVERS", "")
    monkeypatch.delenv("TOOLPIPE_ALLOW_RUN_MCP_SERVERS")
    out = io.StringIO()

    code = cli.main(["serve", "--port", "8799", "--aws-port", "8799"], out=out)

    assert code == 2
    assert out.getvalue() == "error: --aws-port 8799 is the API's port: choose another, or 0 for a free one\n"
    assert not (tmp_path / "state.json").exists()


@pytest.mark.parametrize(
    ("port", "aws_port", "chosen"), [(8710, None, 8711), (0, None, 0), (65535, None, 0), (8710, 9000, 9000)]
)
def test_the_aws_endpoint_defaults_to_the_port_after_the_apis(
    port: int, aws_port: int | None, chosen: int
) -> None:
    assert cli._aws_port(SimpleNamespace(port=port, aws_port=aws_port)) == chosen  # type: ignore[arg-type]


def test_terminal_escapes_in_what_the_cli_prints_are_shown_not_obeyed() -> None:
    # A file a trigger read, or a model's answer, may carry escapes that retitle or clear a terminal.
    import io

    from toolpipe.infra.cli import _Visible

    written = io.StringIO()
    _Visible(written).write("answer: \x1b]0;PWNED\x07\x1b[2Jhi\x9b\n\tnext é\n")
    assert written.getvalue() == "answer: \\x1b]0;PWNED\\x07\\x1b[2Jhi\\x9b\n\tnext é\n"
