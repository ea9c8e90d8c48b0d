"""Finding your project from any of its folders: the nearest `pyproject.toml` with a
`[tool.toolpipe]` table, and the state folder, app and template it names."""

import io
import os
import re
from pathlib import Path

import pytest

from toolpipe.infra import cli
from toolpipe.infra.cli.discovery import state_dir
from toolpipe.infra.local.template import PACKAGED, configured_path
from toolpipe.shared.app_ref import AppRef, find_app
from toolpipe.shared.errors import ConfigurationError
from toolpipe.shared.project import find_project


def _pyproject(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(f'[project]\nname = "p"\n{text}')
    return folder


@pytest.fixture
def no_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TOOLPIPE_HOME", "TOOLPIPE_APP", "TOOLPIPE_APP_PATH", "TOOLPIPE_TEMPLATE"):
        monkeypatch.delenv(name, raising=False)


def test_every_subfolder_finds_the_root_and_its_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_overrides: None
) -> None:
    root = _pyproject(tmp_path / "proj", '[tool.toolpipe]\napp = "pkg.agents"\ntemplate = "t/stack.json"\n')
    deep = root / "pkg" / "sub"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert find_project() is not None and find_project() == find_project(root)
    assert state_dir() == root / ".toolpipe"
    assert find_app() == AppRef("pkg.agents", str(root))  # the root goes on sys.path, not pkg/sub
    assert configured_path() == root / "t" / "stack.json"  # relative to the root, not the cwd


def test_a_pyproject_without_the_table_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_overrides: None
) -> None:
    root = _pyproject(tmp_path, '[tool.toolpipe]\napp = "outer.agents"\n')
    vendored = _pyproject(root / "vendor" / "lib", "[tool.ruff]\nline-length = 100\n")
    monkeypatch.chdir(vendored)
    assert state_dir() == root / ".toolpipe"
    assert find_app() == AppRef("outer.agents", str(root))


def test_the_inner_of_nested_projects_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_overrides: None
) -> None:
    outer = _pyproject(tmp_path, '[tool.toolpipe]\napp = "outer.agents"\ntemplate = "outer.json"\n')
    inner = _pyproject(outer / "inner", "[tool.toolpipe]\n")  # a project of its own, no app yet
    monkeypatch.chdir(inner)
    assert state_dir() == inner / ".toolpipe"
    assert find_app() is None  # never the outer project's app
    assert configured_path() == PACKAGED  # nor its template


def test_toolpipe_home_overrides_and_no_project_means_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_overrides: None
) -> None:
    root = _pyproject(tmp_path / "proj", "[tool.toolpipe]\n")
    monkeypatch.chdir(root)
    monkeypatch.setenv("TOOLPIPE_HOME", "elsewhere")
    assert state_dir() == root / "elsewhere"
    monkeypatch.setenv("TOOLPIPE_HOME", "  ")  # blank: unset, not the current folder itself
    assert state_dir() == root / ".toolpipe"
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.chdir(outside)
    assert find_project() is None and state_dir() == outside / ".toolpipe"


def test_a_symlinked_folder_finds_the_project_it_is_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_overrides: None
) -> None:
    root = _pyproject(tmp_path / "real" / "proj", "[tool.toolpipe]\n")
    (root / "pkg").mkdir()
    link = tmp_path / "link"
    link.symlink_to(root / "pkg")
    monkeypatch.chdir(link)
    # Its target's project (as git does), by one path: two shells in the same project, one
    # through the link, share one state folder.
    assert state_dir() == root.resolve() / ".toolpipe"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[tool.toolpipe\napp = ", "cannot read it: "),
        (b"\xff\xfe[tool.toolpipe]\n", "cannot read it: 'utf-8' codec can't decode"),
        (b"[tool]\ntoolpipe = 3\n", "tool.toolpipe must be a table"),
    ],
)
def test_a_pyproject_that_cannot_be_read_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_overrides: None, content: bytes, message: str
) -> None:
    root = _pyproject(tmp_path, "[tool.toolpipe]\n")
    broken = root / "sub"
    broken.mkdir()
    (broken / "pyproject.toml").write_bytes(content)
    monkeypatch.chdir(broken)
    with pytest.raises(ConfigurationError, match=f"^{re.escape(str(broken / 'pyproject.toml'))}: ") as raised:
        find_project()
    assert message in str(raised.value) and "\n" not in str(raised.value)
    # As a command reads it: one line, exit 2, no traceback, no server started.
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["approvals"], out, err) == 2
    assert err.getvalue().startswith(f"toolpipe: error: {broken / 'pyproject.toml'}: ")
    assert err.getvalue().count("\n") == 1 and not (root / ".toolpipe").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_pyproject_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_overrides: None
) -> None:
    (_pyproject(tmp_path, "[tool.toolpipe]\n") / "pyproject.toml").chmod(0)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match=r"cannot read it: .*Permission denied"):
        find_project()


def test_an_edited_pyproject_is_read_again(tmp_path: Path, no_overrides: None) -> None:
    root = _pyproject(tmp_path, "[tool.ruff]\n")
    assert find_project(root) is None
    _pyproject(tmp_path, '[tool.toolpipe]\napp = "a.agents"\n# longer, so its size differs\n')
    project = find_project(root)
    assert project is not None and project.settings["app"] == "a.agents"
