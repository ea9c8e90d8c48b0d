"""What `toolpipe` writes where, and how it exits, as a shell sees it: real processes, real pipes.

stdout holds what a command was asked for (a transcript, a run, a JSON result), stderr the
banners and the one-line errors, and the state folder's `toolpipe.log` every log line. Each
CLI process costs ~1 s to start, so the commands of a test run at once where they can.
"""

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from toolpipe.infra.cli.discovery import read_server_file
from toolpipe.infra.local.client import Client
from toolpipe.infra.local.scripted_model import DemoResponder, HttpError, Reply, ScriptedModelServer

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "What is 2+3?"
FAILING = "this one fails"  # the model endpoint refuses it: the run fails
REFUSED = "model endpoint refused the request: 401 Incorrect API key provided"


def _respond(request: dict[str, Any]) -> Reply | HttpError:
    if FAILING in str(request["messages"][-1].get("content")):
        return HttpError(401, {"error": {"message": "Incorrect API key provided", "type": "auth"}})
    return DemoResponder()(request)


def _env(home: Path, model: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    if model is not None:
        env |= {"OPENAI_BASE_URL": model, "OPENAI_API_KEY": "scripted"}
    return {**env, "TOOLPIPE_HOME": str(home), "PYTHONPATH": str(ROOT)}


def _toolpipe(home: Path, *args: str, stdout: Any = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolpipe.infra.cli", *args],
        env=_env(home),
        cwd=ROOT,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )


def _all(*commands: Callable[[], subprocess.CompletedProcess[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Run the commands at once; their results in order."""
    with concurrent.futures.ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda command: command(), commands))


class Served:
    """`toolpipe serve --json` in front of a model that refuses FAILING prompts."""

    def __init__(self, home: Path, model: str) -> None:
        self.home = home
        self.stderr = (home.parent / f"{home.name}-serve.err").open("w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "toolpipe.infra.cli", "serve", "--port", "0", "--json"],
            env=_env(home, model),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        assert self.process.stdout is not None
        ready = self.process.stdout.readline()  # blocks until the server is ready, or exits
        assert ready, f"serve exited {self.process.wait()}"
        self.ready = json.loads(ready)
        self.url = str(self.ready["url"])

    def stop(self) -> tuple[int, str, str]:
        self.process.send_signal(signal.SIGTERM)
        out, _ = self.process.communicate(timeout=60)
        self.stderr.seek(0)
        return self.process.returncode, out, self.stderr.read()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with ScriptedModelServer(_respond) as model:
        server = Served(tmp_path_factory.mktemp("cli"), model.base_url)
        try:
            yield server
        finally:
            code, out, err = server.stop()
        # Its one result was the JSON line it was ready with; the failed run's log lines went
        # to the log file, not to its terminal.
        assert code == 0 and out == "", out + err
        assert err == f"toolpipe: state folder {server.home}\nstopped; state saved in {server.home}\n"


def test_serve_json_says_where_it_serves_in_one_document(served: Served) -> None:
    assert set(served.ready) >= {"api_url", "url", "aws_endpoint", "s3_trigger", "event_bus", "home", "pid"}
    assert served.ready["api_url"] == f"{served.url}/v1" and served.ready["pid"] == served.process.pid


def test_serve_writes_its_banners_on_stderr_and_nothing_on_stdout(tmp_path: Path) -> None:
    """Without `--json`, where it serves is a banner for a person: stdout stays empty, so
    `toolpipe serve | …` or `>file` carries no banner."""
    with ScriptedModelServer(_respond) as model:
        process = subprocess.Popen(
            [sys.executable, "-m", "toolpipe.infra.cli", "serve", "--port", "0"],
            env=_env(tmp_path, model.base_url),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 60
            while (info := read_server_file(tmp_path)) is None:  # written once it answers
                assert process.poll() is None and time.monotonic() < deadline, "serve did not start"
                time.sleep(0.05)
            assert Client(info.url).health()[0] == 200
        finally:
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=60)
    # Every command names its state folder first (the project's, or TOOLPIPE_HOME's).
    banners = [
        line for line in err.splitlines(keepends=True) if not line.startswith("toolpipe: state folder ")
    ]
    assert process.returncode == 0, err
    assert out == "", out
    assert [line.split(":")[0] for line in banners[:-1]] == [
        "model endpoint",
        "AWS endpoint",
        "S3 trigger",
        "EventBridge bus",
        "toolpipe server at http",
    ]
    assert model.base_url in banners[0]  # the model it was given
    assert f"· state {tmp_path} · ready in " in banners[-2]
    assert banners[-1] == f"stopped; state saved in {tmp_path}\n"


def _logged(home: Path, text: str, timeout: float = 10) -> str:
    """The server's log file once it holds `text`, or as it is after `timeout`. The server logs a
    run's failure after recording it, so a `run` that read the status may end before the line is
    written (seen once in CI: the file still empty)."""
    deadline = time.monotonic() + timeout
    while True:
        log = (home / "toolpipe.log").read_text()
        if text in log or time.monotonic() > deadline:
            return log
        time.sleep(0.05)


def test_a_run_that_succeeds_or_fails_keeps_results_on_stdout_and_one_error_line_on_stderr(
    served: Served,
) -> None:
    ok, failed, as_json = _all(
        lambda: _toolpipe(served.home, "run", PROMPT),
        lambda: _toolpipe(served.home, "run", FAILING),
        lambda: _toolpipe(served.home, "run", PROMPT, "--json"),
    )
    banner = f"toolpipe: state folder {served.home}\nmodel endpoint: {served.ready['model_endpoint']}\n"

    assert ok.returncode == 0, ok.stderr
    assert ok.stderr == banner  # nothing else: no log line, no emulator output
    lines = ok.stdout.splitlines()
    assert lines[0].startswith("run ") and lines[1] == f"user: {PROMPT}"
    assert "answer: 2 + 3 = 5.0." in lines and lines[-1].startswith("status: succeeded · ")

    assert failed.returncode == 1
    assert failed.stderr == f"{banner}toolpipe: error: run failed: ModelRejectedError: {REFUSED}\n"
    assert failed.stdout.splitlines()[-1].startswith("status: failed · ")

    assert as_json.returncode == 0, as_json.stderr
    body = json.loads(as_json.stdout)  # one JSON document: the run as `show --json` prints it
    assert body["run"]["status"] == "succeeded" and body["run"]["output"] == "2 + 3 = 5.0."
    assert [m["kind"] for m in body["messages"]] == ["user", "assistant", "tool_result", "assistant"]
    assert "answer: 2 + 3 = 5.0." in as_json.stderr  # the transcript is progress there

    # The failed run's log lines are in the server's log file.
    assert '"message":"run failed"' in _logged(served.home, '"message":"run failed"')


def test_usage_errors_and_an_unknown_agent_exit_2_on_stderr_before_anything_starts(tmp_path: Path) -> None:
    agent, timezone, failed_json = _all(
        lambda: _toolpipe(
            tmp_path, "run", "hi", "--agent", "nobody", stdout=subprocess.DEVNULL
        ),  # >/dev/null
        lambda: _toolpipe(tmp_path, "run", "hi", "--timezone", "Mars/Olympus"),
        lambda: _toolpipe(tmp_path, "show", "no-such-run", "--json", "--timeout", "1"),
    )

    assert agent.returncode == 2
    error = agent.stderr.splitlines()[-1]
    assert error.startswith("toolpipe run: error: argument --agent: unknown agent 'nobody' (known: assistant")
    assert error.endswith("`toolpipe agents` lists them with their tools")
    assert timezone.returncode == 2 and timezone.stdout == ""
    assert timezone.stderr.splitlines()[-1] == (
        "toolpipe run: error: argument --timezone: unknown time zone 'Mars/Olympus' "
        "(use an IANA name such as 'Europe/Paris')"
    )
    assert failed_json.returncode == 2 and failed_json.stdout == ""
    assert json.loads(failed_json.stderr) == {
        "error": "toolpipe: unrecognized arguments: --timeout 1",
        "exit_code": 2,
    }
    assert list(tmp_path.iterdir()) == []  # no server started, no state written


def test_a_reader_that_closes_early_ends_the_command_quietly(served: Served) -> None:
    client = Client(served.url)
    status, body = client.request("POST", "/runs", {"input": PROMPT})
    assert status == 202, body
    run_id = body["run_id"]
    assert [e for e, _ in client.events(run_id, timeout=60)][-1] == "end"

    def closed_early(*args: str) -> subprocess.CompletedProcess[str]:
        read, write = os.pipe()
        os.close(read)  # the reader is gone before the command writes a byte: `| head -0`
        try:
            return _toolpipe(served.home, *args, stdout=write)
        finally:
            os.close(write)

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        results = list(
            pool.map(
                lambda args: closed_early(*args), [("show", run_id), ("show", run_id, "--json"), ("agents",)]
            )
        )
    state = f"toolpipe: state folder {served.home}\n"
    for result, said in zip(results, [state, state, ""], strict=True):
        # 141 as for any program a closed pipe stops; no BrokenPipeError, no "Exception ignored".
        assert (result.returncode, result.stderr) == (141, said), result.args


def test_invoke_pipes_into_json_tool_and_a_failing_handler_prints_lambdas_error(tmp_path: Path) -> None:
    piped, failing = tmp_path / "piped", tmp_path / "failing"
    shell = (
        f"{sys.executable} -m infra.cli invoke orchestrator events/execution_status_change.json "
        f"--run-id gone | {sys.executable} -m json.tool"
    )
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        pipeline = pool.submit(
            subprocess.run,
            ["bash", "-o", "pipefail", "-c", shell],
            env=_env(piped),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        raised = pool.submit(
            _toolpipe, failing, "invoke", "orchestrator", "events/orchestrator_step.json", "--run-id", "nope"
        ).result()
        through = pipeline.result()

    assert through.returncode == 0, through.stderr
    assert json.loads(through.stdout) == {"status": "ignored"}
    assert through.stderr.startswith(f"toolpipe: state folder {piped}\nmodel endpoint: scripted demo model")
    assert len(through.stderr.splitlines()) == 2
    # The handler's Powertools log line went to the log file, not between the results.
    assert '"message":"ended execution has no run"' in (piped / "toolpipe.log").read_text()

    assert raised.returncode == 1
    assert json.loads(raised.stdout) == {
        "errorType": "RunNotFoundError",
        "errorMessage": "run nope not found",
    }
    *_, error = raised.stderr.splitlines()
    assert error == (
        "toolpipe: error: orchestrator raised RunNotFoundError: run nope not found "
        f"(traceback in {failing / 'toolpipe.log'})"
    )
    assert "Traceback" not in raised.stderr and "Traceback" in (failing / "toolpipe.log").read_text()
