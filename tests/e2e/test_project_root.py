"""One project, one state folder: a command run from any subfolder of a project finds the
server a command in its root started, and decides its pending approval (real processes)."""

import os
import re
import subprocess
import sys
from pathlib import Path

from toolpipe.infra.local.scripted_model import Reply, ScriptedModelServer, ScriptResponder

ROOT = Path(__file__).resolve().parents[2]

AGENTS = '''
from toolpipe import Agent, tool


@tool(requires_approval=True)
def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city.
    """
    return f"sunny in {city}"


weather = Agent(name="weather", instructions="You tell the weather.", tools=[get_weather])
'''


def _project(folder: Path) -> Path:
    (folder / "pkg").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "pyproject.toml").write_text(
        '[project]\nname = "weather"\nversion = "0.1.0"\n\n[tool.toolpipe]\napp = "pkg.agents"\n'
    )
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "pkg" / "agents.py").write_text(AGENTS)
    return folder


def _env(model_url: str) -> dict[str, str]:
    unset = ("TOOLPIPE_HOME", "TOOLPIPE_APP", "TOOLPIPE_APP_PATH", "TOOLPIPE_TEMPLATE", "TOOLPIPE_API_URL")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    # This checkout's toolpipe; the project's own package only through its pyproject.toml.
    return {**env, "PYTHONPATH": str(ROOT), "OPENAI_BASE_URL": model_url, "OPENAI_API_KEY": "sk-test"}


def _toolpipe(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolpipe.infra.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_from_a_subfolder_approvals_lists_and_approve_decides_the_root_servers_call(tmp_path: Path) -> None:
    project = _project(tmp_path / "weather")
    state = f"toolpipe: state folder {project / '.toolpipe'}\n"
    replies = ScriptResponder(
        [Reply(tool_calls=[("get_weather", {"city": "Paris"})]), Reply(content="Sunny in Paris.")]
    )
    with ScriptedModelServer(replies) as model:
        env = _env(model.base_url)
        run = subprocess.Popen(
            [sys.executable, "-m", "toolpipe.infra.cli", "run", "Weather in Paris?", "--timeout", "90"],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert run.stdout is not None
            waiting = next(line for line in run.stdout if "toolpipe approve" in line)
            match = re.search(r"toolpipe approve ([0-9a-f]{32})", waiting)
            assert match, waiting
            approval_id = match.group(1)

            # From the package's folder: the project's server, not a second, empty one.
            listed = _toolpipe(project / "pkg", env, "approvals")
            assert listed.returncode == 0, listed.stderr
            assert listed.stderr == state
            [row] = listed.stdout.splitlines()
            assert row.startswith(f"{approval_id}  approval  pending  get_weather(")

            approved = _toolpipe(project / "tests", env, "approve", approval_id)
            assert approved.returncode == 0, approved.stderr
            assert approved.stdout.startswith(f"approved {approval_id} (run ")

            rest, errors = run.communicate(timeout=90)
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()
    assert run.returncode == 0, errors
    assert errors.startswith(state)
    assert "answer: Sunny in Paris." in rest
    # One state folder, the root's; none in the subfolders the commands ran in.
    assert [p for p in project.rglob(".toolpipe")] == [project / ".toolpipe"]
