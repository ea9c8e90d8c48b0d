"""Your own tools offline from the CLI: a project whose pyproject.toml names a model script,
run as a user runs it (real processes), with no OPENAI_BASE_URL and no flag."""

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from toolpipe.infra.local.client import Client

ROOT = Path(__file__).resolve().parents[2]

AGENTS = '''from toolpipe import Agent, tool

_FORECASTS = {"paris": "sunny, 21 °C", "oslo": "snow, -3 °C"}


@tool
def get_weather(city: str) -> str:
    """Get today's weather in a city.

    Args:
        city: The city's name.
    """
    return f"{city}: {_FORECASTS[city.strip().lower()]}"


weather = Agent(name="weather", instructions="You answer about the weather.", tools=[get_weather])
'''

SCRIPT = """\
scripts:
  - when: 'weather in (?P<city>[A-Za-z ]+)'
    replies:
      - tool_calls:
          - name: get_weather
            arguments: {city: '{city}'}
      - content: '{results}'
"""


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "desk"
    (project / "desk").mkdir(parents=True)
    (project / "desk" / "__init__.py").write_text("")
    (project / "desk" / "agents.py").write_text(AGENTS)
    (project / "scripted_model.yaml").write_text(SCRIPT)
    (project / "pyproject.toml").write_text(
        '[project]\nname = "desk"\nversion = "0.1.0"\n\n'
        '[tool.toolpipe]\napp = "desk.agents"\nscripted_model = "scripted_model.yaml"\n'
    )
    return project


def _toolpipe(project: Path, *args: str, **env: str) -> Callable[[], subprocess.CompletedProcess[str]]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TOOLPIPE_"))}
    environment = {**clean, "PYTHONPATH": str(ROOT), "TOOLPIPE_HOME": str(project / ".toolpipe"), **env}

    def command() -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "toolpipe.infra.cli", *args],
            cwd=project,
            env=environment,
            capture_output=True,
            text=True,
            timeout=180,
        )
        # Every command that uses the state folder names it first (tests/e2e/test_project_root.py).
        done.stderr = done.stderr.removeprefix(f"toolpipe: state folder {project / '.toolpipe'}\n")
        return done

    return command


def _all(*commands: Callable[[], subprocess.CompletedProcess[str]]) -> list[subprocess.CompletedProcess[str]]:
    with concurrent.futures.ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda command: command(), commands))


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The stderr of a command that failed: its one error line (after the model banner, if any)."""
    lines = [line for line in done.stderr.splitlines() if not line.startswith("model endpoint: ")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_the_projects_script_calls_its_tool_and_an_unscripted_prompt_fails(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (project / "bad.yaml").write_text("scripts:\n  - replies:\n      - tool_calls: [{arguments: {}}]\n")
    script = project / "scripted_model.yaml"

    ran, unscripted, malformed, conflict = _all(
        _toolpipe(project, "run", "What is the weather in Oslo?"),
        _toolpipe(project, "run", "Tell me a joke"),
        _toolpipe(project, "run", "What is the weather in Oslo?", "--scripted-model", "bad.yaml"),
        _toolpipe(
            project, "run", "hi", "--scripted-model", "bad.yaml", OPENAI_BASE_URL="http://127.0.0.1:9/v1"
        ),
    )

    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stderr.startswith(f"model endpoint: scripted model from {script.resolve()}\n")
    assert 'call get_weather({"city": "Oslo"})' in ran.stdout
    assert "answer: Oslo: snow, -3 °C" in ran.stdout and "status: succeeded" in ran.stdout

    assert unscripted.returncode == 1, unscripted.stdout + unscripted.stderr
    assert "status: failed" in unscripted.stdout
    assert _one_line(unscripted).endswith(
        f"{script.resolve()}: no script's `when` matches the prompt 'Tell me a joke'"
    )

    assert malformed.returncode == 2 and malformed.stdout == ""
    assert _one_line(malformed) == (
        f"toolpipe: error: {(project / 'bad.yaml').resolve()}: scripts[0].replies[0].tool_calls[0]: 'name' is required"
    )
    assert conflict.returncode == 2
    assert _one_line(conflict) == (
        "toolpipe: error: --scripted-model bad.yaml and OPENAI_BASE_URL=http://127.0.0.1:9/v1 both "
        "name the model: keep one"
    )


def test_the_demo_model_fails_a_prompt_it_cannot_do(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (project / "pyproject.toml").write_text(
        '[project]\nname = "desk"\nversion = "0.1.0"\n\n[tool.toolpipe]\napp = "desk.agents"\n'
    )
    [ran] = _all(_toolpipe(project, "run", "What is the weather in Paris?"))
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert ran.stderr.startswith("model endpoint: scripted demo model at http://127.0.0.1:")
    assert "the demo model cannot do 'What is the weather in Paris?'" in _one_line(ran)


def test_serve_names_its_script_by_its_absolute_path(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (project / "bad.yaml").write_text("scripts:\n  - when: '(unclosed'\n    replies: [{content: a}]\n")
    [refused] = _all(_toolpipe(project, "serve", "--port", "0", "--scripted-model", "bad.yaml"))
    assert refused.returncode == 2 and refused.stdout == ""
    assert _one_line(refused).startswith(
        f"toolpipe: error: {(project / 'bad.yaml').resolve()}: scripts[0].when: not a regular expression: "
    )

    command = [sys.executable, "-m", "toolpipe.infra.cli", "serve", "--port", "0", "--json"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TOOLPIPE_"))}
    env |= {"PYTHONPATH": str(ROOT), "TOOLPIPE_HOME": str(project / ".toolpipe")}
    # From a subfolder, by a relative path: the server and its health name the file absolutely.
    (project / "sub").mkdir()
    with subprocess.Popen(
        [*command, "--scripted-model", "../scripted_model.yaml"],
        cwd=project / "sub",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as server:
        try:
            assert server.stdout is not None
            ready = json.loads(server.stdout.readline())
            status, health = Client(ready["url"]).health()
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
    expected = f"scripted model from {(project / 'scripted_model.yaml').resolve()}"
    assert ready["model_endpoint"] == expected
    assert status == 200 and health["model_endpoint"] == expected


def test_a_script_calling_a_tool_its_agent_lacks_is_refused_before_anything_starts(tmp_path: Path) -> None:
    # Issue 33, item 5: a typo ran, the model was told the tool is unknown, and the run
    # "succeeded" with that error for its answer.
    project = _project(tmp_path)
    script = project / "scripted_model.yaml"
    script.write_text(SCRIPT.replace("name: get_weather", "name: get_wether"))
    ran, served = _all(
        _toolpipe(project, "run", "What is the weather in Oslo?"),
        _toolpipe(project, "serve", "--port", "0"),
    )
    for refused in (ran, served):
        assert refused.returncode == 2 and refused.stdout == "", refused.stdout + refused.stderr
        assert _one_line(refused) == (
            f"toolpipe: error: {script.resolve()}: scripts[0].replies[0].tool_calls[0]: agent 'weather' "
            "has no tool 'get_wether' (did you mean 'get_weather'?)"
        )
