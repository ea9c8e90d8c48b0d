"""The first fifteen minutes (issue 23, "Done when"), as a newcomer takes them in a shell: `toolpipe
init`, a tool of their own, run offline with the model scripted by the project's
scripted_model.yaml (no flag, no OPENAI_BASE_URL), an approval given in a browser, and `cdk synth`
of the project's stack with the CDK CLI, offline."""

import json
import os
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.e2e.test_init import _environment, _init

if TYPE_CHECKING:
    from playwright.sync_api import Page

ROOT = Path(__file__).resolve().parents[2]

# What the newcomer adds to the scaffold's agents.py: a tool that waits for a person.
GET_TIME = '''

@tool(requires_approval=True)
def get_time(city: str) -> str:
    """Get the time now in a city.

    Args:
        city: The city's name, for example Oslo.
    """
    from datetime import datetime
    from zoneinfo import ZoneInfo

    zones = {"paris": "Europe/Paris", "oslo": "Europe/Oslo", "lima": "America/Lima"}
    zone = zones.get(city.strip().lower())
    if zone is None:
        raise ValueError(f"no clock for '{city}'; known cities: Paris, Oslo, Lima")
    return f"{city}: {datetime.now(ZoneInfo(zone)):%H:%M}"

'''

# ... and the script that has the offline model call it.
TIME_SCRIPT = """  - when: 'time is it in (?P<city>[A-Za-z ]+)'
    replies:
      - tool_calls:
          - name: get_time
            arguments: {city: '{city}'}
      - content: 'The time: {results}'
"""


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


def _add_the_gated_tool(project: Path) -> None:
    agents = project / "weather_agents" / "agents.py"
    text = agents.read_text()
    assert "tools=[get_weather]" in text and "\n\nweather = Agent(" in text
    agents.write_text(
        text.replace("\n\nweather = Agent(", f"{GET_TIME}\nweather = Agent(").replace(
            "tools=[get_weather]", "tools=[get_weather, get_time]"
        )
    )
    scripted = project / "scripted_model.yaml"
    scripted.write_text(scripted.read_text() + TIME_SCRIPT)


def _approve_in_the_browser(page: "Page", env: dict[str, str], project: Path) -> str:
    """Start the run that waits for approval, open the link it prints, press Approve; its output."""
    from playwright.sync_api import expect

    run = subprocess.Popen(
        ["python", "-m", "toolpipe", "run", "What time is it in Oslo?", "--timeout", "120"],
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
        assert any("get_time(" in line and "Oslo" in line for line in printed), printed

        response = page.goto(link.group(0))
        assert response is not None and response.status == 200
        expect(page.locator("h1")).to_contain_text("get_time")
        page.get_by_role("button", name="Approve", exact=True).click()
        expect(page.locator("h1")).to_contain_text("Approved")

        rest, errors = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, "".join(printed) + rest + errors
    return "".join(printed) + rest


@pytest.mark.slow
def test_init_a_tool_offline_an_approval_in_the_browser_and_cdk_synth(tmp_path: Path, page: "Page") -> None:
    python = _environment(tmp_path)
    project = tmp_path / "weather-agents"
    _init(python, project)
    env = _shell(python, project)

    # The README's next step, as written: the project's tool is called, offline.
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

    # A tool of their own that waits for a person, approved in a browser.
    _add_the_gated_tool(project)
    output = _approve_in_the_browser(page, env, project)
    assert re.search(r"Oslo: \d\d:\d\d", output) and "The time: " in output, output

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
