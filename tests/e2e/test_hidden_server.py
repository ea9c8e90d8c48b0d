"""The server a command starts for itself (issue 33): it stops once nothing runs, even while a
call waits for approval (the state folder keeps it, and the next server resumes it); Ctrl-C on
`toolpipe run` says the run goes on and where to look; `toolpipe status` and `toolpipe stop`;
`serve` stops within 5 s with a call waiting, and its log holds no error of it. Real processes,
a project made by `toolpipe init`."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.test_serve_reload import TUTORIAL, Serving, add_tool, new_project, toolpipe

FORECAST = "Email ana@example.com the forecast for Paris"


def _with_approvals(tmp_path: Path) -> Path:
    project = new_project(tmp_path)
    code = (TUTORIAL / "send_forecast.py").read_text().replace("from toolpipe import tool\n", "")
    add_tool(project, code, "send_forecast", (TUTORIAL / "forecast_script.yaml").read_text())
    return project


def as_from_a_terminal() -> None:
    """Ctrl-C as a shell's foreground job gets it: a test run started in the background of a
    shell without job control (`cmd &` in a script) inherits SIGINT ignored, and so would every
    `toolpipe run` it starts, which then never hears the Ctrl-C the test sends (Popen's
    `preexec_fn`)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _waiting_run(project: Path) -> tuple[subprocess.Popen[str], str, str, list[str]]:
    """`toolpipe run` until its call waits for approval: the process, run id, approval id, lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLPIPE_", "PYTEST_", "OPENAI_"))}
    run = subprocess.Popen(
        [sys.executable, "-m", "toolpipe", "run", FORECAST],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )
    assert run.stdout is not None
    lines: list[str] = []
    for line in run.stdout:
        lines.append(line)
        if "waiting for approval" in line:
            break
    text = "".join(lines)
    approval = re.search(r"toolpipe approve ([0-9a-f]{32})", text)
    run_id = re.search(r"^run ([0-9a-f]{32})", text, re.MULTILINE)
    assert approval and run_id, text
    return run, run_id.group(1), approval.group(1), lines


@pytest.mark.slow
def test_ctrl_c_during_an_approval_then_status_approve_and_stop(tmp_path: Path) -> None:
    project = _with_approvals(tmp_path)
    run, run_id, approval_id, _ = _waiting_run(project)
    server_pid = json.loads((project / ".toolpipe" / "server.json").read_text())["pid"]

    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=30)
    assert run.returncode == 130, err
    said = err.strip().splitlines()[-1]
    assert f"interrupted; run {run_id} goes on in the server at http://127.0.0.1:" in said, err
    assert f"toolpipe show {run_id}" in said and "toolpipe status" in said, said
    assert "Traceback" not in err

    # Nothing runs, a call waits: the server this command started stops anyway, soon.
    deadline = time.monotonic() + 15
    while _alive(server_pid):
        assert time.monotonic() < deadline, (
            Path(f"/proc/{server_pid}/status").read_text()[:200]
            + (project / ".toolpipe" / "toolpipe.log").read_text()[-2000:]
        )
        time.sleep(0.1)

    status = toolpipe(project, "status")
    assert status.returncode == 0, status.stderr
    assert f"no server serves {project / '.toolpipe'}" in status.stdout, status.stdout
    assert "1 call waits (kept: the next server resumes them)" in status.stdout, status.stdout
    assert f"{approval_id}  approval  send_forecast  run {run_id}" in status.stdout

    # The approval given now is taken: the next server resumes the run, which goes on.
    approved = toolpipe(project, "approve", approval_id)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    deadline = time.monotonic() + 60
    while True:
        shown = toolpipe(project, "show", run_id, "--json")
        record = json.loads(shown.stdout)["run"]
        if record["status"] != "running":
            break
        assert time.monotonic() < deadline, shown.stdout
        time.sleep(0.5)
    assert (
        record["status"] == "succeeded"
        and record["output"] == "sent the forecast for Paris to ana@example.com"
    )

    # A server of your own: status shows it, stop stops it.
    server = Serving(project)
    status = toolpipe(project, "status")
    assert f"server: pid {server.process.pid} at {server.url}/v1" in status.stdout, status.stdout
    assert "model endpoint: scripted model from" in status.stdout and "nothing waits" in status.stdout
    stopped = toolpipe(project, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped the server at {server.url} (pid {server.process.pid})" in stopped.stdout
    assert server.process.wait(timeout=10) == 0
    assert "no server serves" in toolpipe(project, "stop").stdout


@pytest.mark.slow
def test_ctrl_c_after_the_run_ended_exits_as_the_run_did(tmp_path: Path) -> None:
    """The run printed its status; the command waits for the server it started to stop: Ctrl-C
    then is no interruption of anything (exit 0, nothing said)."""
    project = new_project(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLPIPE_", "PYTEST_", "OPENAI_"))}
    run = subprocess.Popen(
        [sys.executable, "-m", "toolpipe", "run", "What is the weather in Paris?"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )
    assert run.stdout is not None
    for line in run.stdout:
        if line.startswith("status: "):
            break
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=30)
    assert run.returncode == 0, err
    assert "interrupted" not in err and "Traceback" not in err


@pytest.mark.slow
def test_serve_stops_within_5_s_with_a_call_waiting_and_logs_no_error(tmp_path: Path) -> None:
    project = _with_approvals(tmp_path)
    server = Serving(project)
    run, run_id, _, _ = _waiting_run(project)
    run.kill()
    run.communicate()

    started = time.monotonic()
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(timeout=30) == 0
    took = time.monotonic() - started
    output = server.stop()
    assert took < 5, f"{took:.1f} s: {output}"
    log = (project / ".toolpipe" / "toolpipe.log").read_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]

    # Kept, as it waited: the next server resumes it.
    status = toolpipe(project, "status")
    assert f"run {run_id}" in status.stdout and "1 call waits" in status.stdout, status.stdout
