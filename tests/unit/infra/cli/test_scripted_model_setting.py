"""Which model a command asks for: OPENAI_BASE_URL, else a script (flag, environment, project),
else the demo; a script named next to OPENAI_BASE_URL is refused in one line."""

import argparse
from pathlib import Path

import pytest

from toolpipe.infra.cli.errors import EXIT_USAGE, CommandError
from toolpipe.infra.cli.model_endpoint import SCRIPTED_MODEL_ENV, scripted_model_setting, spoken, wanted_model
from toolpipe.shared.errors import ConfigurationError


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv(SCRIPTED_MODEL_ENV, raising=False)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.toolpipe]\napp = "desk.agents"\nscripted_model = "model.yaml"\n'
    )
    # A subfolder with a pyproject.toml of another tool: not a toolpipe project, looked past.
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "sub" / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n")
    monkeypatch.chdir(tmp_path / "sub" / "deeper")
    return tmp_path


def _args(script: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(scripted_model=script)


def test_the_projects_script_from_a_subfolder_the_flag_and_the_environment(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert scripted_model_setting(_args()) == (project / "model.yaml").resolve()
    assert scripted_model_setting(_args("../x.yaml")) == (project / "sub" / "x.yaml").resolve()
    monkeypatch.setenv(SCRIPTED_MODEL_ENV, str(project / "env.yaml"))
    assert scripted_model_setting(_args()) == (project / "env.yaml").resolve()
    assert scripted_model_setting(_args("y.yaml")) == (project / "sub" / "deeper" / "y.yaml").resolve()
    wanted = wanted_model(_args("m.yaml"), {})
    assert wanted == f"scripted:{project / 'sub' / 'deeper' / 'm.yaml'}"
    assert spoken(wanted) == f"scripted model from {project / 'sub' / 'deeper' / 'm.yaml'}"


def test_openai_base_url_wins_over_the_project_and_conflicts_with_a_given_script(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert scripted_model_setting(_args()) is None
    assert wanted_model(_args(), {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1/"}) == "http://127.0.0.1:9/v1"
    with pytest.raises(CommandError) as refused:
        scripted_model_setting(_args("m.yaml"))
    assert refused.value.code == EXIT_USAGE
    assert str(refused.value) == (
        "--scripted-model m.yaml and OPENAI_BASE_URL=http://127.0.0.1:9/v1 both name the model: keep one"
    )
    monkeypatch.setenv(SCRIPTED_MODEL_ENV, "e.yaml")
    with pytest.raises(CommandError, match=f"^{SCRIPTED_MODEL_ENV} e.yaml and OPENAI_BASE_URL="):
        scripted_model_setting(_args())


def test_no_setting_is_the_demo_and_a_bad_one_is_one_line(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.toolpipe]\napp = "desk.agents"\n')
    assert scripted_model_setting(_args()) is None
    (project / "pyproject.toml").write_text("[tool.toolpipe]\nscripted_model = 3\n")
    with pytest.raises(
        ConfigurationError, match=r"pyproject.toml: \[tool.toolpipe\] scripted_model must be a file path$"
    ):
        scripted_model_setting(_args())
