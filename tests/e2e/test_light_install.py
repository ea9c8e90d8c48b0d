"""A project's tests need no CDK (issue 23, "a light install for tests"): `toolpipe[local]`, what a
scaffolded project's `test` extra installs, is moto without aws-cdk-lib, constructs or cdk-nag;
`toolpipe.testing`, `toolpipe run` and the server it starts never import them; and a CDK app run
without them says in one line what to install."""

import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

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
    assert [r.split("[")[0] for r in extras["local"]] == ["moto"]
    assert {r.split(">")[0] for r in extras["cdk"]} == {"aws-cdk-lib", "constructs", "cdk-nag"}
    assert "toolpipe[local,cdk]" in extras["dev"]


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
