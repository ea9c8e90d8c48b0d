"""`toolpipe init`'s files, and the example project made of them."""

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from toolpipe.infra.cli.scaffold import ScaffoldError, init_project, package_name, project_files

ROOT = Path(__file__).resolve().parents[4]


def test_the_example_project_is_a_scaffolded_one() -> None:
    # examples/assistant is `toolpipe init --package assistant` with its own agents and tests.
    example = ROOT / "examples" / "assistant"
    for name, text in project_files("assistant", with_example=False, taken_ok=True).items():
        if name in ("README.md", "assistant/__init__.py"):
            continue  # its own words
        if name in ("package.json", ".nvmrc", "Makefile"):
            continue  # it is installed, synthesized and deployed by the repository's own
        if (
            name == "cdk_app.py"
        ):  # the same call, with what its send_email tool needs added (its runner, its grant)
            assert (
                'synth("Assistant", agents="assistant.agents", runners=["mail"], extend=allow_email)'
                in (example / name).read_text()
            )
            continue
        written = (example / name).read_text()
        if name == "pyproject.toml":  # with the template its own CDK app synthesizes (what it adds)
            own = (
                "# The stack the local runtime runs: this project's CDK app synthesized (it grants `send_email`\n"
                "# its SES identity), written by `python -m toolpipe.infra.local.template .` from this folder.\n"
                'template = "assistant.template.json"\n'
            )
            assert own in written
            written = written.replace(own, "")
        assert written == text, f"examples/assistant/{name} differs from the scaffold"


@pytest.mark.parametrize(
    ("folder", "package"), [("weather", "weather"), ("my-agents", "my_agents"), ("2048", "agents_2048")]
)
def test_the_package_is_named_from_the_folder(tmp_path: Path, folder: str, package: str) -> None:
    assert package_name(tmp_path / folder) == package


@pytest.mark.parametrize(
    "package", ["toolpipe", "infra", "shared", "class", "no-dash", "json", "boto3", "café", "assistant"]
)
def test_a_package_name_that_would_clash_or_is_not_one_is_refused(tmp_path: Path, package: str) -> None:
    with pytest.raises(ScaffoldError):
        init_project(tmp_path / "p", package)
    assert not (tmp_path / "p").exists()


def test_an_existing_file_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("mine")
    with pytest.raises(ScaffoldError, match=r"pyproject\.toml already exist; nothing written"):
        init_project(tmp_path, "weather")
    assert (tmp_path / "pyproject.toml").read_text() == "mine"
    assert not (tmp_path / "weather").exists()


def test_a_file_in_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ScaffoldError, match="is a file, not a folder"):
        init_project(tmp_path / "afile", "weather")


def test_toolpipe_is_a_dependency_by_version_never_by_a_path_of_this_machine(tmp_path: Path) -> None:
    init_project(tmp_path / "weather-agents")
    pyproject = tomllib.loads((tmp_path / "weather-agents" / "pyproject.toml").read_text())
    project = pyproject["project"]
    assert project["dependencies"] == ["toolpipe~=0.1.0"]
    # The tests need the local runtime only; the CDK app is the `deploy` extra.
    assert project["optional-dependencies"] == {
        "test": ["toolpipe[local]~=0.1.0", "pytest>=8"],
        "deploy": ["toolpipe[cdk]~=0.1.0"],
    }
    assert pyproject["tool"]["toolpipe"] == {
        "app": "weather_agents.agents",
        "scripted_model": "scripted_model.yaml",
    }
    for path in (tmp_path / "weather-agents").rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert "file://" not in text and str(ROOT) not in text, path


def test_the_version_range_is_this_toolpipe_s() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    major, minor, _ = version.split(".")
    assert f"toolpipe~={major}.{minor}.0" in project_files("weather", taken_ok=True)["pyproject.toml"]


def test_the_scripted_model_calls_the_tool_with_the_city_of_the_prompt() -> None:
    files = project_files("weather", taken_ok=True)
    [script] = yaml.safe_load(files["scripted_model.yaml"])["scripts"]
    assert script["replies"] == [
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "{city}"}}]},
        {"content": "{results}"},
    ]
    import re

    match = re.search(script["when"], "What is the weather in Paris?", re.IGNORECASE)
    assert match is not None and match["city"] == "Paris"
    # A project with no example has no script for a tool it lacks.
    bare = project_files("weather", with_example=False, taken_ok=True)
    assert "scripted_model.yaml" not in bare and "scripted_model" not in bare["pyproject.toml"]


def test_the_cdk_cli_and_node_are_pinned_as_toolpipe_pins_them() -> None:
    ours = json.loads((ROOT / "package.json").read_text())
    theirs = json.loads(project_files("weather_agents", taken_ok=True)["package.json"])
    assert theirs["private"] is True and theirs["name"] == "weather-agents-cdk-cli"
    assert theirs["engines"] == ours["engines"] == {"node": ">=22"}
    assert theirs["devDependencies"] == {
        "aws-cdk": ours["devDependencies"]["aws-cdk"],
        "node": ours["devDependencies"]["node"],
    }
    assert project_files("weather_agents", taken_ok=True)[".nvmrc"] == "22\n"


def test_the_stack_is_named_after_the_project() -> None:
    files = project_files("weather_agents", taken_ok=True)
    assert 'synth("WeatherAgents", agents="weather_agents.agents")' in files["cdk_app.py"]
    assert "make deploy" in files["README.md"] and "WeatherAgents" in files["README.md"]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_install_never_takes_pypi_s_toolpipe(tmp_path: Path) -> None:
    # `toolpipe` on PyPI is another project (0.1.0, an MCP proxy): with no wheel or source of
    # ours, `make install` stops before pip could pick it.
    init_project(tmp_path / "weather-agents")
    venv = tmp_path / "weather-agents" / ".venv"
    # Made here without pip (ensurepip takes half a minute on a loaded machine): `make install`
    # keeps a .venv it finds, and stops before it would need pip.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLPIPE_", "MAKE", "PYTHONPATH"))}
    made = subprocess.run(
        ["make", "install", f"PYTHON={sys.executable}"],
        cwd=tmp_path / "weather-agents",
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode != 0
    [line] = [line for line in made.stderr.splitlines() if line.startswith("make install:")]
    assert "PyPI's toolpipe is another project" in line and "TOOLPIPE_WHEELS" in line
    assert "Traceback" not in made.stderr
    assert not list(venv.glob("lib/python*/site-packages/toolpipe*")), "pip installed a toolpipe"
    assert not (venv / ".installed").exists()


@pytest.mark.parametrize("where", ["toolpipe", "scaffold"])
def test_built_packages_are_ignored_by_git(where: str, tmp_path: Path) -> None:
    """Issue 33, item 12: `dist/` (a wheel or sdist built here) showed as untracked files."""
    if where == "toolpipe":
        root = ROOT
    else:
        root = tmp_path / "project"
        root.mkdir()
        (root / ".gitignore").write_text(project_files("weather_agents")[".gitignore"])
        subprocess.run(["git", "init", "-q", str(root)], check=True)
    for built in ("dist/toolpipe-0.1.0-py3-none-any.whl", "build/lib/toolpipe/__init__.py"):
        ignored = subprocess.run(["git", "check-ignore", "--no-index", "-q", built], cwd=root)
        assert ignored.returncode == 0, f"{root}: git does not ignore {built}"
