"""Misbehaving tools against a real `toolpipe serve` (issue 18): a tool that is retried past its
timeout, exits, hangs (with a timeout and without), fails with an unreadable message, prints
100 MB, leaves a thread behind, raises its own TimeoutError, ignores its cancellation or answers
with a value that cannot be written. Every non-idempotent side effect happens at most once,
every run ends, the server answers after them all and exits on SIGTERM within its bound."""

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.hostile_app import MARKS_ENV
from tests.e2e.test_serve import ROOT, Served, _env
from tests.e2e.test_serve_runs_api import _http
from toolpipe.infra.cdk.functions import API, TOOL_WORKER
from toolpipe.infra.local.scripted_model import Answer, Reply, ScriptedModelServer
from toolpipe.infra.local.template import TEMPLATE_ENV, configured_path
from toolpipe.shared.runs.tool_executor import RESERVE_SECONDS

# The worker's timeout in the template this server runs: a tool with no timeout of its own
# gets what is left of it after the reserve for storing the outcome (20 - 10 = 10 s at most:
# printing 100 MB takes a few seconds on a loaded machine).
WORKER_SECONDS = 20
# What the docs promise (docs/concepts/local-runtime.md): runs in progress get 30 s to end, then stopping takes a few more.
SIGTERM_BOUND_SECONDS = 45
CLI = (sys.executable, "-m", "toolpipe.infra.cli")


def respond(request: dict[str, Any]) -> Answer:
    """Call the tool the prompt names; then answer with what it returned."""
    messages = request["messages"]
    if messages[-1]["role"] == "tool":
        return Reply(content=f"result: {messages[-1]['content']}")
    return Reply(tool_calls=[(messages[-1]["content"].strip(), {})])


def _short_worker_template(folder: Path) -> Path:
    template = json.loads(configured_path().read_text())
    [worker] = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"].get("Handler") == TOOL_WORKER.handler
    ]
    worker["Properties"]["Timeout"] = WORKER_SECONDS
    # The set runs 22 runs at once as the one local caller: above the stack's default running
    # quota (docs/concepts/limits.md "Quotas"), which is not what this test is about.
    [api] = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"].get("Handler") == API.handler
    ]
    api["Properties"]["Environment"]["Variables"]["TOOLPIPE_QUOTA_RUNNING"] = "0"
    path = folder / "short-worker.template.json"
    path.write_text(json.dumps(template))
    return path


class Hostile:
    def __init__(self, served: Served, marks: Path) -> None:
        self.served, self.marks = served, marks

    def start(self, tool: str) -> str:
        status, body, _ = _http(f"{self.served.api_url}/runs", "POST", {"input": tool, "agent": "hostile"})
        assert status == 202, body
        return str(body["run_id"])

    def finish(self, run_id: str, timeout: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status, shown, _ = _http(f"{self.served.api_url}/runs/{run_id}", "GET")
            assert status == 200, shown
            if shown["run"]["status"] != "running":
                return dict(shown["run"])
            assert time.monotonic() < deadline, f"run {run_id} still running after {timeout} s"
            time.sleep(0.2)

    def starts(self) -> Counter[str]:
        return Counter(line.split()[1] for line in self.marks.read_text().splitlines())


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    home = tmp_path_factory.mktemp("hostile")
    marks = home / "marks"
    marks.touch()
    env = {
        MARKS_ENV: str(marks),
        TEMPLATE_ENV: str(_short_worker_template(home)),
    }
    with ScriptedModelServer(respond) as model:
        env |= {"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "scripted"}
        served = Served(home, "--app", "tests.e2e.hostile_app", env=env)
        try:
            yield Hostile(served, marks)
        finally:
            if served.process.poll() is None:
                served.process.kill()
                served.process.wait()


def test_the_hostile_set_leaves_every_run_ended_and_the_server_answering(hostile: Hostile) -> None:
    started_at = time.monotonic()
    runs = {tool: hostile.start(tool) for tool in ("charge_slowly", "hangs", "hangs_without_timeout")}
    runs |= {f"exits-{i}": hostile.start("exits") for i in range(11)}
    runs |= {
        tool: hostile.start(tool)
        for tool in (
            "unreadable",
            "shouts",
            "leaves_a_thread",
            "own_timeout",
            "ignores_cancel",
            "circular",
            "moves_away",
            "closes_stdout",
        )
    }
    answers = {name: hostile.finish(run_id) for name, run_id in runs.items()}

    assert {name: run["status"] for name, run in answers.items()} == dict.fromkeys(answers, "succeeded")
    said = {name: run["output"] for name, run in answers.items()}
    # Retried on any exception, but a timed-out attempt may still be running: never started again.
    assert said["charge_slowly"] == (
        "result: Error: Tool 'charge_slowly' timed out after 1 s. It may still take effect: "
        "check before calling it again."
    )
    assert said["hangs"].startswith("result: Error: Tool 'hangs' timed out after 1 s.")
    # No timeout of its own: the worker's time left, not forever.
    assert said["hangs_without_timeout"].startswith(
        "result: Error: Tool 'hangs_without_timeout' timed out after"
    )
    assert "(the time its worker had left)" in said["hangs_without_timeout"]
    for i in range(11):
        assert said[f"exits-{i}"] == "result: Error: Tool 'exits' failed: SystemExit: 2"
    assert (
        said["unreadable"]
        == "result: Error: Tool 'unreadable' failed: _Unreadable: (its message could not be read)"
    )
    assert said["shouts"] == "result: shouted"
    assert said["leaves_a_thread"] == "result: left"
    # The tool's own TimeoutError is its error, not a timeout of the call.
    assert (
        said["own_timeout"]
        == "result: Error: Tool 'own_timeout' failed: TimeoutError: the upstream took too long"
    )
    assert said["ignores_cancel"].startswith("result: Error: Tool 'ignores_cancel' timed out after 1 s.")
    assert said["circular"].startswith(
        "result: Error: Tool 'circular' failed: ValueError: Circular reference"
    )

    assert said["moves_away"] == "result: moved" and said["closes_stdout"] == "result: closed"

    starts = hostile.starts()
    assert starts["charge_slowly"] == 1  # one side effect, though retry_on covers every exception
    assert starts["exits"] == 11
    assert all(starts[tool] == 1 for tool in runs if not tool.startswith("exits"))
    # After all of them, the ten workers still take calls.
    assert hostile.finish(hostile.start("quick"))["output"] == "result: quick answer"
    print(f"hostile set: {len(runs)} runs ended in {time.monotonic() - started_at:.1f} s")

    # A SIGTERM while a tool hangs (and one left a thread of its own): the server exits in bound.
    hung = hostile.start("hangs_without_timeout")
    deadline = time.monotonic() + 30
    while hostile.starts()["hangs_without_timeout"] < 2:
        assert time.monotonic() < deadline, "the hanging tool never started"
        time.sleep(0.05)
    signalled = time.monotonic()
    code, output = hostile.served.stop()
    took = time.monotonic() - signalled
    print(f"SIGTERM during a hang: exited {code} in {took:.1f} s")
    assert code == 0, output
    assert took < SIGTERM_BOUND_SECONDS
    # The thread a tool left ended with the call's process: none is left in the server.
    assert "state saved" in output and "thread(s) a tool started" not in output
    assert hung  # its run ended with the drain (the hang has the worker's time) or resumes at the next start
    assert WORKER_SECONDS - RESERVE_SECONDS == 10


def test_a_background_server_exits_after_a_tool_left_a_thread(tmp_path: Path) -> None:
    """`toolpipe run` starts a server that stops when idle: a tool's thread must not keep it."""

    marks = tmp_path / "marks"
    marks.touch()
    with ScriptedModelServer(respond) as model:
        env = {
            **_env(tmp_path / "home"),
            MARKS_ENV: str(marks),
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "scripted",
        }
        ran = subprocess.run(
            [*CLI, "run", "--app", "tests.e2e.hostile_app", "--agent", "hostile", "leaves_a_thread"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stderr
        assert "result: left" in ran.stdout
        # The server went idle 1 s after the run and exited past the tool's thread.
        deadline = time.monotonic() + 30
        while _servers_of(tmp_path / "home"):
            assert time.monotonic() < deadline, "the background server is still running"
            time.sleep(0.1)
    # The tool's thread was in the call's process, which ended with the call: not the server's.
    log = (tmp_path / "home" / "toolpipe.log").read_text()
    assert "thread(s) a tool started" not in log


def _servers_of(home: Path) -> list[int]:
    """The live processes serving `home` (found by their environment: the server file is gone
    as soon as one stops)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except PermissionError:
            # The server is not dumpable (its environment is not for a tool to read): only
            # root reads it. Here, a process of toolpipe's we cannot read is counted as running.
            if b"toolpipe" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
            continue
        except OSError:
            continue
        if f"TOOLPIPE_HOME={home}".encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found
