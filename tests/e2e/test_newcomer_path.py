"""The first fifteen minutes, as the README and the tutorials have a newcomer take them in a
shell: `make demo`, `toolpipe init`, the project's tool run offline with the model scripted by its
scripted_model.yaml (no flag, no OPENAI_BASE_URL), a tool of their own added, then edited while
`toolpipe serve` runs, one that waits for approval approved in a browser, then one walked away
from (Ctrl-C, `toolpipe status`, `approve`, `stop`), and `cdk synth` of the project's stack with
the CDK CLI, offline.
The code and scripts they add are the files the tutorial pages show (tests/unit/test_docs.py)."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.e2e.test_hidden_server import as_from_a_terminal
from tests.e2e.test_init import _environment, _init
from tests.e2e.test_serve_reload import Serving

if TYPE_CHECKING:
    from playwright.sync_api import Page

ROOT = Path(__file__).resolve().parents[2]

# What the tutorials have the newcomer add, as the pages show it (docs/tutorials/*.md show
# these files): a tool, then a tool that waits for approval, each with its script.
TUTORIAL = ROOT / "docs" / "snippets" / "tutorial"


def _shell(python: Path, project: Path) -> dict[str, str]:
    """A newcomer's environment: the project's venv and the CDK CLI first on PATH, no model
    endpoint, no state folder set (the project's own is found), this checkout's toolpipe."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLPIPE_", "PYTEST_", "OPENAI_"))}
    path = os.pathsep.join([str(python.parent), str(ROOT / "node_modules" / ".bin"), env.get("PATH", "")])
    return {**env, "PATH": path, "CDK_DISABLE_VERSION_CHECK": "1"}


def _toolpipe(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # `python -m toolpipe`: the `toolpipe` script of the environment this test runs in.
    return subprocess.run(
        ["python", "-m", "toolpipe", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )


def _add(project: Path, tool: str, script: str) -> None:
    """Add a tutorial's tool to the scaffold's agent and its script to scripted_model.yaml."""
    agents = project / "weather_agents" / "agents.py"
    text = agents.read_text()
    assert "\n\nweather = Agent(" in text and "    tools=[" in text
    code = (TUTORIAL / f"{tool}.py").read_text().replace("from toolpipe import tool\n", "")  # imported there
    text = text.replace("\n\nweather = Agent(", f"\n{code}\n\nweather = Agent(")
    agents.write_text(text.replace("    tools=[", f"    tools=[{tool}, "))
    scripted = project / "scripted_model.yaml"
    scripted.write_text(scripted.read_text() + (TUTORIAL / script).read_text())


def _approve_in_the_browser(page: "Page", env: dict[str, str], project: Path) -> str:
    """Start the run that waits for approval, open the link it prints, press Approve; its output."""
    from playwright.sync_api import expect

    run = subprocess.Popen(
        [
            "python",
            "-m",
            "toolpipe",
            "run",
            "Email ana@example.com the forecast for Paris",
            "--timeout",
            "120",
        ],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout is not None
        printed: list[str] = []
        link = None
        for line in run.stdout:
            printed.append(line)
            link = re.search(r"http://127\.0\.0\.1:\d+/v1/approvals/[0-9a-f]{32}/page\?\S+", line)
            if link:
                break
        assert link, "".join(printed) + (run.stderr.read() if run.poll() is not None and run.stderr else "")
        assert any("send_forecast(" in line and "ana@example.com" in line for line in printed), printed

        response = page.goto(link.group(0))
        assert response is not None and response.status == 200
        expect(page.locator("h1")).to_contain_text("send_forecast")
        page.get_by_role("button", name="Approve", exact=True).click()
        expect(page.locator("h1")).to_contain_text("Approved")

        rest, errors = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, "".join(printed) + rest + errors
    return "".join(printed) + rest


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _ctrl_c_status_approve_stop(env: dict[str, str], project: Path) -> None:
    """Ctrl-C on a run whose call waits: it says the run goes on; its server stops (the call is
    kept); `status` lists the call, `approve` decides it (the next server resumes the run), and
    `stop` stops the server a person started."""
    run = subprocess.Popen(
        ["python", "-m", "toolpipe", "run", "Email ana@example.com the forecast for Oslo"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )
    assert run.stdout is not None
    printed = ""
    for line in run.stdout:
        printed += line
        if "waiting for approval" in line:
            break
    approval = re.search(r"toolpipe approve ([0-9a-f]{32})", printed)
    run_id = re.search(r"^run ([0-9a-f]{32})", printed, re.MULTILINE)
    assert approval and run_id, printed + (run.stderr.read() if run.poll() is not None and run.stderr else "")
    server_pid = json.loads((project / ".toolpipe" / "server.json").read_text())["pid"]
    run.send_signal(signal.SIGINT)
    _, said = run.communicate(timeout=60)
    assert run.returncode == 130 and f"run {run_id.group(1)} goes on in the server" in said, said
    assert f"toolpipe show {run_id.group(1)}" in said and "toolpipe status" in said, said

    # Watched from outside, not with `status`: a command's request is a use that keeps it up.
    deadline = time.monotonic() + 30
    while _alive(server_pid):
        assert time.monotonic() < deadline, _toolpipe(env, project, "status").stdout
        time.sleep(0.1)
    status = _toolpipe(env, project, "status")
    assert "no server serves" in status.stdout, status.stdout
    assert "1 call waits" in status.stdout and approval.group(1) in status.stdout, status.stdout

    approved = _toolpipe(env, project, "approve", approval.group(1))
    assert approved.returncode == 0, approved.stdout + approved.stderr
    while (
        json.loads(_toolpipe(env, project, "show", run_id.group(1), "--json").stdout)["run"]["status"]
        == "running"
    ):
        assert time.monotonic() < deadline + 60
        time.sleep(0.5)
    shown = _toolpipe(env, project, "show", run_id.group(1))
    assert "answer: sent the forecast for Oslo to ana@example.com" in shown.stdout, shown.stdout

    served = Serving(project, "python", env)
    status = _toolpipe(env, project, "status")
    assert f"server: pid {served.process.pid}" in status.stdout and "nothing waits" in status.stdout
    stopped = _toolpipe(env, project, "stop")
    assert stopped.returncode == 0 and "stopped the server" in stopped.stdout, stopped.stdout + stopped.stderr
    assert served.process.wait(timeout=30) == 0


def test_make_demo_installs_only_what_the_demo_needs() -> None:
    """Issue 33, item 3: `make demo` ran `make install`, which installs Chromium with apt-get
    (root, Debian), the CDK and Node from npm, and mypy and playwright: 1.3 GB for one run.
    Its plan on a fresh clone (a .venv not made yet), as make prints it without running it."""
    plan = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-n",
            "demo",
            "VENV=/nonexistent/.venv",
            "CHROMIUM=/nonexistent/chromium",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    for needless in ("chromium", "apt-get", "sudo", "npm", ".[dev]", "cdk", "playwright"):
        assert not any(needless in line for line in lines), (needless, plan.stdout)
    [install] = [line for line in lines if " pip install " in line]
    assert "-e '.[local]' -e examples/assistant" in install
    assert lines[-1] == '/nonexistent/.venv/bin/toolpipe run "What is the square root of 475695037565?"'


@pytest.mark.slow
def test_the_getting_started_path_from_make_demo_to_cdk_synth(tmp_path: Path, page: "Page") -> None:
    # `make demo`, as the README's first command (its install is done: `make test` ran it), with
    # no browser to be found: the demo needs none.
    demo = subprocess.run(
        ["make", "--no-print-directory", "demo", "CHROMIUM=/nonexistent/chromium"],
        cwd=ROOT,
        env={**_shell(Path(sys.executable), ROOT), "TOOLPIPE_HOME": str(tmp_path / "demo")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "call square_root(" in demo.stdout and "status: succeeded" in demo.stdout, demo.stdout

    python = _environment(tmp_path)
    project = tmp_path / "weather-agents"
    _init(python, project)
    env = _shell(python, project)

    # Your first tool, offline: the README's next step, as written, calls the project's tool.
    ran = _toolpipe(env, project, "run", "What is the weather in Paris?")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "get_weather(" in ran.stdout and "Paris: sunny, 21 °C" in ran.stdout, ran.stdout
    assert "status: succeeded" in ran.stdout
    # The state folder in use, said once on stderr: the project's own.
    assert f"toolpipe: state folder {project / '.toolpipe'}" in ran.stderr, ran.stderr

    # A prompt no script answers fails plainly, never a success.
    lost = _toolpipe(env, project, "run", "Tell me a joke")
    assert lost.returncode != 0 and "scripted_model.yaml" in lost.stdout + lost.stderr
    assert "Traceback" not in lost.stderr

    # A tool they add, and its script: called.
    _add(project, "get_sunset", "sunset_script.yaml")
    sunset = _toolpipe(env, project, "run", "When is the sunset in Oslo?")
    assert sunset.returncode == 0, sunset.stdout + sunset.stderr
    assert 'get_sunset({"city": "Oslo"})' in sunset.stdout
    assert "answer: The sun sets at Oslo: sunset at 21:14." in sunset.stdout, sunset.stdout

    # With `toolpipe serve` up, a tool edited is what the next run calls: no restart.
    served = Serving(project, "python", env)
    try:
        agents = project / "weather_agents" / "agents.py"
        agents.write_text(agents.read_text().replace("sunset at 21:14", "sunset at 21:16"))
        edited = _toolpipe(env, project, "run", "When is the sunset in Oslo?")
        assert edited.returncode == 0, edited.stdout + edited.stderr
        assert "-> get_sunset: Oslo: sunset at 21:16" in edited.stdout, edited.stdout
        served.said(r"toolpipe: reloaded your app .* after a change to weather_agents/agents\.py")
    finally:
        served.stop()

    # A call that waits for approval (the approval tutorial), approved in a browser.
    _add(project, "send_forecast", "forecast_script.yaml")
    output = _approve_in_the_browser(page, env, project)
    assert "answer: sent the forecast for Paris to ana@example.com" in output, output

    # Walk away from a call that waits: Ctrl-C, then see it, approve it, stop the server.
    _ctrl_c_status_approve_stop(env, project)

    # Their stack, as `make synth` makes it: the CDK CLI, offline.
    out = tmp_path / "cdk.out"
    synth = subprocess.run(
        ["cdk", "synth", "--quiet", "--output", str(out)],
        cwd=project,
        env={**env, "TOOLPIPE_BUNDLE": "0"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert synth.returncode == 0, synth.stdout + synth.stderr
    template = json.loads((out / "WeatherAgents.template.json").read_text())
    apps = {
        r["Properties"]["Environment"]["Variables"].get("TOOLPIPE_APP")
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"].get("Handler", "").startswith("toolpipe.")
    }
    assert apps == {"weather_agents.agents"}
