"""A project's tests need no CDK (issue 23, "a light install for tests"): `toolpipe[local]`, what a
scaffolded project's `test` extra installs, is moto without aws-cdk-lib, constructs or cdk-nag;
`toolpipe.testing`, `toolpipe run` and the server it starts never import them; and a CDK app run
without them says in one line what to install."""

import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from tests.e2e.test_init import _init, _run

ROOT = Path(__file__).resolve().parents[2]
# What the `cdk` extra brings: its top-level modules, and jsii, the runtime they load.
CDK_MODULES = ("aws_cdk", "constructs", "cdk_nag", "jsii")


def _environment_without_the_cdk(tmp_path: Path) -> Path:
    """A virtualenv that sees this one's packages (as test_init's does) except the CDK's: in its
    own site-packages, ahead of this one's, each CDK module is one that cannot be imported, as if
    it were not installed."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = env / "lib" / version / "site-packages"
    for name in CDK_MODULES:
        (site / name).mkdir()
        (site / name / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n"
        )
    host = sysconfig.get_paths()["purelib"]
    (site / "host.pth").write_text(f"import site; site.addsitedir({host!r})\n")
    return env / "bin" / "python"


def test_the_local_extra_holds_no_cdk_and_dev_holds_both() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [re.split(r"[\[>=<~]", r)[0] for r in extras["local"]] == ["moto", "regex"]
    assert {r.split(">")[0] for r in extras["cdk"]} == {"aws-cdk-lib", "constructs", "cdk-nag"}
    assert "toolpipe[local,cdk,docs]" in extras["dev"]


def test_a_project_s_tests_and_runs_need_no_cdk_and_its_cdk_app_says_what_to_install(tmp_path: Path) -> None:
    python = _environment_without_the_cdk(tmp_path)
    blocked = _run(python, tmp_path, "-c", "import aws_cdk")
    assert blocked.returncode != 0 and "No module named 'aws_cdk'" in blocked.stderr  # the setup holds
    project = tmp_path / "weather-agents"
    _init(python, project)

    tests = _run(python, project, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "2 passed" in tests.stdout
    # `toolpipe run` and the server it starts (the same interpreter) import no CDK either.
    ran = _run(python, project, "-m", "toolpipe", "run", "What is the weather in Paris?")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "status: succeeded" in ran.stdout

    # `cdk synth` runs the project's CDK app: without the `deploy` extra, one line says so.
    app = _run(python, project, "cdk_app.py", TOOLPIPE_BUNDLE="0")
    assert app.returncode == 1 and "Traceback" not in app.stderr, app.stderr
    assert app.stderr.strip() == (
        "toolpipe: install toolpipe[cdk] to synthesize (aws_cdk is missing;"
        " in a project `toolpipe init` made: pip install -e '.[deploy]')"
    )


def _copy_of_this_checkout(target: Path) -> Path:
    """This checkout's files (as they are, committed or not) without what builds leave: pip
    builds the wheel in a copy, so the checkout gets no build/ of its own."""
    skip = shutil.ignore_patterns(
        ".git", ".venv*", "node_modules", "build", "dist", "cdk.out", ".toolpipe", "*.egg-info", "*_cache",
        "__pycache__",
    )  # fmt: skip
    shutil.copytree(ROOT, target, symlinks=True, ignore=skip)
    return target


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # This pip, run for the new environment (`--python`), from the index pip is configured with.
    return subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=900,
    )


# Installs from the package index pip is configured with: not in `make test` (tests reach no
# network), in `make light-install`.
@pytest.mark.index
@pytest.mark.slow
def test_a_project_installed_with_its_test_extra_alone_passes_its_tests(tmp_path: Path) -> None:
    """For real: toolpipe's wheel, as the project's README installs it until toolpipe is
    published, then `pip install -e '.[test]'`; no CDK in the environment."""
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "-w", str(wheels), str(_copy_of_this_checkout(tmp_path / "toolpipe"))],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    [wheel] = wheels.glob("toolpipe-*.whl")
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    python = env / "bin" / "python"
    project = tmp_path / "weather-agents"
    _init(Path(sys.executable), project)  # by this toolpipe: the new environment has none yet

    assert _pip(python, "install", "--quiet", "--no-deps", str(wheel)).returncode == 0
    installed = _pip(python, "install", "--quiet", "-e", f"{project}[test]")
    assert installed.returncode == 0, installed.stderr
    # Nothing of this checkout on the path: the environment's packages only.
    alone = {"PYTHONPATH": ""}
    # pip kept this toolpipe: PyPI's (another project, also 0.1.0) has no toolpipe.testing.
    shown = _run(
        python, project, "-c", "import toolpipe.testing, toolpipe; print(toolpipe.__file__)", **alone
    )
    assert shown.returncode == 0 and str(env) in shown.stdout, shown.stdout + shown.stderr
    for name in CDK_MODULES:
        assert _run(python, project, "-c", f"import {name}", **alone).returncode != 0, f"{name} is installed"

    tests = _run(python, project, "-m", "pytest", "-q", "-p", "no:cacheprovider", **alone)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "2 passed" in tests.stdout
