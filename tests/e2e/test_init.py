"""`toolpipe init`: a project of your own, installed in an environment of its own, passes its
own tests, runs an agent and synthesizes its stack — toolpipe's source untouched, even when the
project has `infra/` and `shared/` packages of its own."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

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


@pytest.mark.slow
def test_a_project_with_its_own_infra_and_shared_packages(tmp_path: Path) -> None:
    python = _environment(tmp_path)
    project = tmp_path / "desk"
    _init(python, project)
    # A CDK project's usual layout: its own `infra` (the stack's pieces) and `shared` (code its
    # agents import). Neither may shadow toolpipe's, nor be shadowed.
    (project / "shared").mkdir()
    (project / "shared" / "__init__.py").write_text('SIGN_OFF = "(from the desk)"\n')
    (project / "infra").mkdir()
    (project / "infra" / "__init__.py").write_text('STACK_NAME = "DeskAgents"\n')
    agents = project / "desk" / "agents.py"
    agents.write_text(
        agents.read_text()
        .replace(
            "from toolpipe import Agent, tool",
            "from shared import SIGN_OFF\nfrom toolpipe import Agent, tool",
        )
        .replace('return f"{city}: {forecast}"', 'return f"{city}: {forecast} {SIGN_OFF}"')
    )
    tests = project / "tests" / "test_agents.py"
    tests.write_text(
        tests.read_text().replace('"Paris: sunny, 21 °C"', '"Paris: sunny, 21 °C (from the desk)"')
    )
    app = project / "cdk_app.py"
    app.write_text(
        app.read_text()
        .replace("import aws_cdk as cdk", "import aws_cdk as cdk\nfrom infra import STACK_NAME")
        .replace('cdk.Stack(app, "Desk")', "cdk.Stack(app, STACK_NAME)")
        .replace('app="desk.agents",', 'app="desk.agents",\n    packages=["shared"],')
    )
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace('packages = ["desk"]', 'packages = ["desk", "shared", "infra"]')
    )
    _install(python, project)

    tests_run = _run(python, project, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    assert tests_run.returncode == 0, tests_run.stdout + tests_run.stderr
    ran = _run(python, project, "-m", "toolpipe", "run", "What is the weather in Paris?")
    assert ran.returncode == 0, ran.stdout + ran.stderr

    # Its CDK app, as `cdk synth` runs it (offline: no layers built).
    out = tmp_path / "cdk.out"
    synth = _run(python, project, "cdk_app.py", TOOLPIPE_BUNDLE="0", CDK_OUTDIR=str(out))
    assert synth.returncode == 0, synth.stdout + synth.stderr
    template = json.loads((out / "DeskAgents.template.json").read_text())
    functions = [
        r
        for r in template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"].get("Handler", "").startswith("toolpipe.")
    ]
    assert len(functions) == 4  # orchestrator, tool worker, api, triggers
    assert {f["Properties"]["Environment"]["Variables"]["TOOLPIPE_APP"] for f in functions} == {"desk.agents"}
    assets = {f["Properties"]["Code"]["S3Key"] for f in functions}
    assert len(assets) == 1  # one code asset for every function
    [asset] = [
        p for p in out.iterdir() if p.is_dir() and p.name == f"asset.{next(iter(assets)).split('.')[0]}"
    ]
    staged = {str(p.relative_to(asset)) for p in asset.rglob("*.py")}
    # The project's packages and toolpipe's, side by side; toolpipe's CDK app and emulator left out.
    assert {"desk/agents.py", "shared/__init__.py", "toolpipe/__init__.py"} <= staged
    assert "toolpipe/shared/agents/app.py" in staged and "toolpipe/functions/api/handler.py" in staged
    assert not any(p.startswith(("infra/", "toolpipe/infra/")) for p in staged)
