"""`toolpipe init`: a project of your own, installed in an environment of its own, passes its
own tests and runs an agent, toolpipe's source untouched (tests/infra/test_your_own_cdk_app.py:
the same with `infra/` and `shared/` packages of its own, and its CDK app)."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _source_state() -> str:
    """toolpipe's tracked files as git sees them: the test must leave them as they were."""
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
    ).stdout


def _environment(tmp_path: Path) -> Path:
    """A new virtualenv that sees this one's packages (toolpipe, pytest, moto) as a project's
    environment with toolpipe installed would: a `.pth` line adds them as a site directory."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    host = sysconfig.get_paths()["purelib"]
    (env / "lib" / version / "site-packages" / "host.pth").write_text(
        f"import site; site.addsitedir({host!r})\n"
    )
    return env / "bin" / "python"


def _install(python: Path, project: Path) -> None:
    # This pip, run for the new environment (`--python`); offline (no index, no build isolation).
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-index",
         "--no-deps", "--no-build-isolation", "--disable-pip-version-check", "-e", str(project)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip


def _run(python: Path, project: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # Outside the repository: nothing of toolpipe's source is on the path but what is installed.
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLPIPE_", "PYTEST_", "OPENAI_"))}
    return subprocess.run(
        [str(python), *args],
        cwd=project,
        env={**clean, "TOOLPIPE_HOME": str(project / ".toolpipe"), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _init(python: Path, project: Path) -> None:
    made = _run(python, project.parent, "-m", "toolpipe", "init", project.name)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "tests/test_agents.py" in made.stdout


def test_a_new_project_installs_and_passes_its_own_tests(tmp_path: Path) -> None:
    before = _source_state()
    python = _environment(tmp_path)
    project = tmp_path / "weather-desk"
    _init(python, project)
    assert (project / "weather_desk" / "agents.py").is_file()  # the package named from the folder
    _install(python, project)

    tests = _run(python, project, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "2 passed" in tests.stdout

    # The app is found through the project's pyproject.toml: no --app, no TOOLPIPE_APP.
    ran = _run(python, project, "-m", "toolpipe", "run", "What is the weather in Paris?")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "status: succeeded" in ran.stdout

    again = _run(python, project.parent, "-m", "toolpipe", "init", project.name)
    assert again.returncode == 2 and "already exist; nothing written" in again.stdout + again.stderr
    assert _source_state() == before
