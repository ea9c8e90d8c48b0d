"""The CLI refuses bad arguments before it starts anything, and never sends a POST twice."""

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from toolpipe.infra import cli
from toolpipe.infra.cli import discovery, serving
from toolpipe.infra.cli.arguments import default_timezone
from toolpipe.infra.cli.discovery import state_dir
from toolpipe.infra.cli.session import LocalSession, keyed
from toolpipe.infra.local import client

ROOT = Path(__file__).resolve().parents[4]
EVENT = str(ROOT / "events" / "api_post_run.json")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["run", "hi", "--timeout", "nan"], "argument --timeout: must be more than 0"),
        (["run", "hi", "--timeout", "-1"], "argument --timeout: must be more than 0"),
        (["run", "hi", "--timeout", "4000"], "at most 3600 seconds, not 4000"),
        (["run", " \t\n"], "argument prompt: the prompt is blank"),
        (
            ["run", "hi", "--timezone", "Mars/Olympus"],
            "argument --timezone: unknown time zone 'Mars/Olympus'",
        ),
        (["run", "hi", "--timezone", "../../etc/passwd"], "argument --timezone: not an IANA time zone"),
        (["run", "hi", "--agent", "nobody"], "argument --agent: unknown agent 'nobody' (known: "),
        (["run", "hi", "--mcp", "ftp://example.com"], "argument --mcp: not an http(s) URL"),
        (["run", "hi", "--model", " "], "argument --model: the model name is blank"),
        (["show", "a b"], "not a run id"),
        (["show", "x/messages"], "not a run id"),
        (["show", ""], "not a run id"),
        (["serve", "--port", "70000"], "not a port"),
        (["serve", "--aws-port", "-1"], "not a port"),
        (["serve", "--idle-exit", "nan"], "argument --idle-exit: must be a positive, finite number"),
        (["serve", "--idle-exit", "0"], "argument --idle-exit: must be a positive, finite number"),
        (["invoke", "api", "/nonexistent/event.json"], "argument event: cannot read /nonexistent/event.json"),
        (["invoke", "api", __file__], "is not a JSON event"),
        (["invoke", "api", EVENT, "--object", "/nonexistent"], "argument --object: not a readable file"),
        (["invoke", "nobody", EVENT], "argument function: invalid choice"),
        (
            ["invoke", "api", EVENT, "--approval-id", "APPROVAL_ID"],
            "argument --approval-id: not an approval id",
        ),
        (["agents", "--nope"], "unrecognized arguments: --nope"),
        # A typo names the nearest command, option or value (issue 33, item 9).
        (["runn", "hi"], "invalid choice: 'runn' (choose from "),
        (["runn", "hi"], "): did you mean 'run'?"),
        (
            ["run", "hi", "--agnet", "assistant"],
            "arguments: --agnet assistant; --agnet: did you mean --agent?",
        ),
        (
            ["run", "hi", "--timout=3"],
            "unrecognized arguments: --timout=3; --timout: did you mean --timeout?",
        ),
        (["approvals", "--status", "pendng"], "did you mean 'pending'?"),
        (["invoke", "orchestrater", EVENT], "did you mean 'orchestrator'?"),
        (["answer", "0" * 32], "one of the arguments text --value is required"),
        (["answer", "0" * 32, "Lyon", "--value", "1"], "argument --value: not allowed with argument text"),
        (["answer", "0" * 32, "--value", "{nope"], "argument --value: not JSON: "),
        (["answer", "not-an-id", "Lyon"], "not an approval id (32 hex digits)"),
    ],
)
def test_bad_arguments_exit_2_with_one_error_line_on_stderr_and_start_nothing(
    argv: list[str], says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path))
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as exited:
        cli.main(argv, out, err)
    assert exited.value.code == 2 and list(tmp_path.iterdir()) == []
    assert out.getvalue() == ""
    *usage, error = err.getvalue().splitlines()  # argparse's usage, then the one error line
    assert usage[0].startswith("usage: toolpipe") and not any("error" in line for line in usage)
    assert re.match(rf"toolpipe( {argv[0]})?: error: ", error) and says in error, error

    # The same refusal as one JSON document with --json.
    err = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        cli.main([*argv, "--json"], out, err)
    refused = json.loads(err.getvalue())
    assert exited.value.code == 2 and refused["exit_code"] == 2 and says in refused["error"]


def test_a_word_near_nothing_gets_no_suggestion() -> None:
    import io

    for argv in (["xyzzy"], ["agents", "--xyzzy"]):
        err = io.StringIO()
        with pytest.raises(SystemExit):
            cli.main(argv, io.StringIO(), err)
        assert "did you mean" not in err.getvalue() and "xyzzy" in err.getvalue()


def test_approvals_outside_a_project_says_what_to_do_not_to_run_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33, item 9: it said to run `toolpipe run` first, which fails there too (no agents)."""
    import io

    monkeypatch.chdir(tmp_path)
    for name in ("TOOLPIPE_HOME", "TOOLPIPE_APP", "TOOLPIPE_APP_PATH"):
        monkeypatch.delenv(name, raising=False)
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["approvals"], out, err) == 1
    assert err.getvalue().splitlines()[-1] == (
        f"toolpipe: error: no runs here: no state folder {tmp_path / '.toolpipe'}, and {tmp_path} is in "
        "no project (no pyproject.toml with [tool.toolpipe] there or above): run this from your "
        "project's folder, or set TOOLPIPE_HOME to its state folder (`toolpipe init DIR` makes a project)"
    )
    # In a project, where `toolpipe run` makes the state folder, that is still the advice.
    (tmp_path / "pyproject.toml").write_text('[tool.toolpipe]\napp = "desk.agents"\n')
    err = io.StringIO()
    assert cli.main(["approvals"], out, err) == 1
    assert err.getvalue().splitlines()[-1].endswith(".toolpipe (run `toolpipe run` first)")
    assert not (tmp_path / ".toolpipe").exists()


def test_an_unknown_agent_names_the_known_ones_and_where_to_list_them() -> None:
    import io

    err = io.StringIO()
    with pytest.raises(SystemExit):
        cli.main(["run", "hi", "--agent", "nobody"], io.StringIO(), err)
    assert (
        "(known: assistant, tester, triage); `toolpipe agents` lists them with their tools" in err.getvalue()
    )
    assert "`toolpipe agents` lists the agents and their tools" in _help(["run", "--help"])


def _help(argv: list[str]) -> str:
    import io

    out = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        cli.main(argv, out, io.StringIO())
    assert exited.value.code == 0
    return " ".join(out.getvalue().split())


def test_help_documents_the_exit_statuses_and_where_logs_go() -> None:
    for argv in (["--help"], ["run", "--help"], ["agents", "--help"]):
        text = _help(argv)
        assert "exit status: 0 ok, 1 the run failed" in text and "2 usage error" in text
        assert "toolpipe.log" in text and "--json" in text


def test_a_tz_that_is_not_an_iana_zone_falls_back_to_utc_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    err = io.StringIO()
    monkeypatch.setenv("TZ", "CET-1CEST")
    assert default_timezone(err) == "UTC"
    assert err.getvalue().startswith("toolpipe: warning: TZ='CET-1CEST' is not an IANA time zone")
    monkeypatch.setenv("TZ", ":Europe/Paris")
    assert default_timezone(err) == "Europe/Paris"


def test_agents_lists_each_agent_its_tools_and_their_descriptions() -> None:
    import io

    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["agents"], out, err) == 0 and err.getvalue() == ""
    text = out.getvalue()
    assert text.startswith("assistant (the default model): You are a helpful assistant.")
    assert "  square_root            Compute the square root of a number.\n" in text
    assert "\ntester (the default model): You test toolpipe.\n" in text

    out = io.StringIO()
    assert cli.main(["agents", "--json"], out, err) == 0
    listed = {a["name"]: a for a in json.loads(out.getvalue())["agents"]}
    assert {"name": "sum", "description": "Add two numbers."} in listed["assistant"]["tools"]
    assert listed["tester"]["tool_sources"] == []
    # A handoff is a tool the model sees: listed with the target's description.
    assert listed["triage"]["tools"] == [
        {
            "name": "transfer_to_assistant",
            "description": "Hand the conversation to the assistant agent, which answers from then on: "
            "Arithmetic, dates and times, alarms, emails, and questions for the user.",
        }
    ]


def test_a_post_that_may_have_reached_the_server_is_not_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []
    keys: list[str | None] = []

    class Lost:
        def request(self, method: str, path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
            sent.append(method)
            keys.append((headers or {}).get("Idempotency-Key"))
            raise client.ServerError("lost the local server: timed out")

    monkeypatch.setattr(
        discovery, "connect", lambda home, env=None: SimpleNamespace(client=Lost(), child=None)
    )
    session = LocalSession(tmp_path)

    with pytest.raises(client.ServerError):
        session.request("POST", "/runs", {"prompt": "hi"})
    assert sent == ["POST"]  # it may have started a run: never a second one
    with pytest.raises(client.ServerError):
        session.request("GET", "/runs/x")
    assert sent.count("GET") == LocalSession.ATTEMPTS  # reads are safe to repeat

    # A POST with an Idempotency-Key (the CLI's run, resume and fork send one) is safe to repeat
    # too, with the same key: the API answers a repeat with the run the first one started.
    sent.clear()
    keys.clear()
    with pytest.raises(client.ServerError):
        session.request("POST", "/runs", {"prompt": "hi"}, keyed())
    assert sent == ["POST"] * LocalSession.ATTEMPTS and len(set(keys)) == 1 and keys[0]
    assert keyed() != keyed()


def test_a_deployed_apis_session_asks_again_only_what_is_safe_to_repeat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--api`: a keyed POST and a GET are sent again after a lost answer, with the same key;
    a POST without one, once."""
    from toolpipe.infra.cli import remote

    sent: list[tuple[str, str | None]] = []

    class Lost:
        def request(self, method: str, path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
            sent.append((method, (headers or {}).get("Idempotency-Key")))
            raise client.ServerError("lost https://api.example/v1: timed out")

    monkeypatch.setattr(remote, "RETRY_SECONDS", 0)
    session = remote.RemoteSession("https://api.example/v1", api_key="k")
    monkeypatch.setattr(session, "_client", Lost())
    for method, headers in (("POST", None), ("POST", keyed()), ("GET", None)):
        with pytest.raises(client.ServerError):
            session.request(method, "/runs", None, headers)
    posts = [key for method, key in sent if method == "POST"]
    assert posts[0] is None and len(posts) == 1 + remote.ATTEMPTS
    assert len(set(posts[1:])) == 1 and posts[1]
    assert [method for method, _ in sent].count("GET") == remote.ATTEMPTS


def _after_state_folder(stderr: str, home: Path) -> str:
    """What a command wrote on stderr after the one line naming its state folder."""
    first, _, rest = stderr.partition("\n")
    assert first == f"toolpipe: state folder {home}", stderr
    return rest


@pytest.fixture
def serve_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A state folder of the test's own; `serve` sets TOOLPIPE_ALLOW_RUN_MCP_SERVERS for its
    own process, so the test's process gets it back as it was."""
    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path))
    monkeypatch.setenv("TOOLPIPE_ALLOW_RUN_MCP_SERVERS", "")
    monkeypatch.delenv("TOOLPIPE_ALLOW_RUN_MCP_SERVERS")
    return tmp_path


def test_serve_on_a_taken_port_says_so_at_once_and_resumes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import socket

    from toolpipe.infra.cli.commands import serve as serve_command

    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path))
    # serve sets this for its own process: the test's process gets it back as it was.
    monkeypatch.setenv("TOOLPIPE_ALLOW_RUN_MCP_SERVERS", "")
    monkeypatch.delenv("TOOLPIPE_ALLOW_RUN_MCP_SERVERS")
    # "At once" is "before the runtime": that is checked, not a time (a timed assertion failed
    # CI on a loaded machine, 2.2 s for a refusal that takes milliseconds).
    started: list[object] = []
    monkeypatch.setattr(serve_command, "_serve_runtime", lambda *a: started.append(a))
    taken = socket.create_server(("127.0.0.1", 0))
    out, err = io.StringIO(), io.StringIO()
    try:
        code = cli.main(["serve", "--port", str(taken.getsockname()[1])], out=out, err=err)
    finally:
        taken.close()
    assert code == 1 and started == []
    assert out.getvalue() == ""
    message = _after_state_folder(err.getvalue(), tmp_path)
    assert (
        message.startswith("toolpipe: error: cannot serve on 127.0.0.1:")
        and "Address already in use" in message
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
    err = io.StringIO()
    try:
        code = cli.main(["serve", "--port", "0", "--aws-port", str(port)], err=err)
    finally:
        taken.close()
    assert code == 1
    message = _after_state_folder(err.getvalue(), tmp_path)
    assert (
        message.startswith(f"toolpipe: error: cannot serve on 127.0.0.1:{port}: ")
        and "Address already in use" in message
    )
    assert message.endswith("(--aws-port 0 picks a free one)\n")
    assert not (tmp_path / "state.json").exists()


def test_serve_refuses_one_port_for_the_api_and_the_aws_endpoint(serve_home: Path) -> None:
    import io

    err = io.StringIO()

    code = cli.main(["serve", "--port", "8799", "--aws-port", "8799"], err=err)

    assert code == 2
    assert _after_state_folder(err.getvalue(), serve_home) == (
        "toolpipe: error: --aws-port 8799 is the API's port: choose another, or 0 for a free one\n"
    )
    assert not (serve_home / "state.json").exists()


def test_serve_on_a_host_that_is_not_this_machines_says_so_in_one_line(serve_home: Path) -> None:
    import io

    err = io.StringIO()

    # Port 0 too: it used to skip the check, and the runtime's failure left stderr empty.
    assert cli.main(["serve", "--host", "999.1.1.1", "--port", "0"], err=err) == 1
    message = _after_state_folder(err.getvalue(), serve_home)
    assert message.startswith("toolpipe: error: cannot serve on 999.1.1.1:0: ")
    assert len(message.splitlines()) == 1
    assert not (serve_home / "state.json").exists()


@pytest.mark.parametrize(
    ("port", "aws_port", "chosen"), [(8710, None, 8711), (0, None, 0), (65535, None, 0), (8710, 9000, 9000)]
)
def test_the_aws_endpoint_defaults_to_the_port_after_the_apis(
    port: int, aws_port: int | None, chosen: int
) -> None:
    assert serving.aws_port(SimpleNamespace(port=port, aws_port=aws_port)) == chosen  # type: ignore[arg-type]


def test_terminal_escapes_in_what_the_cli_prints_are_shown_not_obeyed() -> None:
    # A file a trigger read, or a model's answer, may carry escapes that retitle or clear a terminal.
    import io

    from toolpipe.infra.cli.output import Visible

    written = io.StringIO()
    Visible(written).write("answer: \x1b]0;PWNED\x07\x1b[2Jhi\x9b\n\tnext é\n")
    assert written.getvalue() == "answer: \\x1b]0;PWNED\\x07\\x1b[2Jhi\\x9b\n\tnext é\n"
    # A right-to-left override would show "moc.live@evE" reversed, as "Eve@evil.com"-like text.
    written = io.StringIO()
    Visible(written).write("to: bob@example.com\u202egnp.exe\u2066x\u2069\n")
    assert written.getvalue() == "to: bob@example.com\\u202egnp.exe\\u2066x\\u2069\n"


def test_the_state_folder_is_absolute_so_a_tool_that_changes_directory_cannot_move_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLPIPE_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    home = state_dir()
    monkeypatch.chdir("/")
    assert home == tmp_path / ".toolpipe" and home.is_absolute()


def test_resume_takes_the_limits_it_raises_by_the_agents_names() -> None:
    import io

    from toolpipe.infra.cli.parser import parse

    out = io.StringIO()
    args = parse(["resume", "abc", "--max-tool-calls", "80", "--max-cost-usd", "2.5"], out, out, False, False)
    assert (args.command, args.run_id, args.max_tool_calls, args.max_cost_usd, args.max_tokens) == (
        "resume",
        "abc",
        80,
        2.5,
        None,
    )
    fork = parse(["fork", "abc", "--turn", "2", "--input", "and then?"], out, out, False, False)
    assert (fork.command, fork.turn, fork.input) == ("fork", 2, "and then?")


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_resume_refuses_a_limit_that_is_not_above_0(value: str) -> None:
    import io

    from toolpipe.infra.cli.parser import parse

    err = io.StringIO()
    with pytest.raises(SystemExit) as ended:
        parse(["resume", "abc", "--max-tool-calls", value], io.StringIO(), err, False, False)
    assert ended.value.code == 2 and "argument --max-tool-calls" in err.getvalue()


def test_a_command_for_a_running_server_names_the_app_without_loading_any_agent(tmp_path: Path) -> None:
    """`show`, `status`, `approvals` and `--help` hand the app's name on to the server (which
    loads it); the CLI loading the agents package too doubled each one's cost (0.34 → 0.18 s of
    CPU for a `show`, docs/benchmarks.md). Measured in a process of its own: this one has them."""
    import subprocess
    import sys

    project = tmp_path / "desk"
    (project / "desk").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.toolpipe]\napp = "desk.agents"\n')
    (project / "desk" / "__init__.py").write_text("")
    (project / "desk" / "agents.py").write_text("raise SystemExit('the app was imported')\n")
    (project / ".toolpipe").mkdir()
    script = """
import argparse, io, os, sys
from toolpipe.infra import cli
from toolpipe.infra.cli import discovery, offline
from toolpipe.infra.cli.parser import name_the_app

try:
    cli.main(["--help"], out=io.StringIO(), err=io.StringIO())
except SystemExit as e:  # argparse's, once help is printed
    assert e.code == 0, e
discovery.discover = lambda home: "a server serves the folder"
offline.LocalSession = lambda home: "a session with it"  # connecting is not this test's
name_the_app(["show", "0" * 32])
session = offline.open_reading_session(argparse.Namespace(api=None, app=None))
loaded = sorted(m for m in sys.modules if m.startswith(("toolpipe.shared.agents", "desk")))
print(session, os.environ.get("TOOLPIPE_APP"), loaded)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLPIPE_", "PYTEST_"))}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=project,
        env={**env, "TOOLPIPE_HOME": str(project / ".toolpipe")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "a session with it desk.agents []\n", done.stdout + done.stderr
