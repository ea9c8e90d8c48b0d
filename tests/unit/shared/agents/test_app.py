"""Finding and loading your app: the module that defines your agents."""

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from toolpipe import Agent
from toolpipe.shared.agents.app import agents_of, import_app
from toolpipe.shared.agents.app_bytecode import check_by_hash
from toolpipe.shared.app_ref import AppRef, find_app
from toolpipe.shared.errors import ConfigurationError


def _project(folder: Path, tool_section: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(f'[project]\nname = "p"\n{tool_section}')
    return folder


def test_the_nearest_pyproject_names_the_app(tmp_path: Path) -> None:
    project = _project(tmp_path / "p", '[tool.toolpipe]\napp = "desk.agents"\n')
    (project / "desk" / "deep").mkdir(parents=True)
    assert find_app(project / "desk" / "deep", environ={}) == AppRef("desk.agents", str(project))
    # The environment wins (what deployed functions and a server started by the CLI get).
    assert find_app(project, environ={"TOOLPIPE_APP": "other.agents"}) == AppRef("other.agents")


def test_an_edited_pyproject_is_read_again(tmp_path: Path) -> None:
    # The setting is parsed once per version of the file (every agent lookup asks for it).
    project = _project(tmp_path, '[tool.toolpipe]\napp = "first.agents"\n')
    assert find_app(project, environ={}) == AppRef("first.agents", str(project))
    _project(tmp_path, '[tool.toolpipe]\napp = "second.agents"\n')
    assert find_app(project, environ={}) == AppRef("second.agents", str(project))
    (project / "pyproject.toml").write_text("[tool.toolpipe\n")
    with pytest.raises(ConfigurationError, match="cannot read it"):
        find_app(project, environ={})


def test_a_nearer_project_without_an_app_is_not_the_outer_ones(tmp_path: Path) -> None:
    outer = _project(tmp_path, '[tool.toolpipe]\napp = "outer.agents"\n')
    inner = _project(outer / "inner", "[tool.toolpipe]\n")
    assert find_app(inner, environ={}) is None
    # A pyproject.toml without the table is not a project's: a vendored package, say.
    vendored = _project(outer / "vendored", "")
    assert find_app(vendored, environ={}) == AppRef("outer.agents", str(outer))


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ('[tool.toolpipe]\napp = "my-project.agents"\n', "is not a module name"),
        ("[tool.toolpipe]\napp = 3\n", "must be a module name string"),
        ("[tool.toolpipe\napp = ", "cannot read it"),
    ],
)
def test_a_bad_app_setting_is_one_clear_error(tmp_path: Path, section: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        find_app(_project(tmp_path, section), environ={})


def test_a_missing_module_says_how_to_make_it_importable() -> None:
    with pytest.raises(ConfigurationError, match=r"app module .nowhere_at_all\.agents. not found: install"):
        import_app(AppRef("nowhere_at_all.agents"))


def test_the_top_level_agents_are_the_apps_and_one_name_is_one_agent() -> None:
    app = ModuleType("app")
    first = Agent(name="first", instructions="One.", tools=[])
    app.first, app.alias, app.second = first, first, Agent(name="second", instructions="Two.", tools=[])
    app.not_an_agent = "first"
    assert [a.name for a in agents_of(app)] == ["first", "second"]
    app.clash = Agent(name="first", instructions="Another.", tools=[])
    with pytest.raises(ConfigurationError, match="two agents are named 'first'"):
        agents_of(app)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ('raise RuntimeError("boom")\n', r"RuntimeError: boom \(.*agents\.py, line 1\)"),
        ("def f(:\n", r"SyntaxError: invalid syntax \(.*agents\.py, line 1\)"),
        # Raised inside toolpipe (`@tool` checks the function): the place is the app's line that
        # applied it, never toolpipe's own file (issue 33, item 8).
        (
            'from toolpipe import tool\n\n@tool\ndef f(x) -> str:\n    """F."""\n    return x\n',
            r"DefinitionError: tool 'f': parameter 'x' needs a type hint \(.*/broken_\d+/agents\.py, line 3\)",
        ),
        (
            'from toolpipe import Agent\n\nAgent(name="a b", instructions="x")\n',
            r"DefinitionError: agent name 'a b': .* \(.*/broken_\d+/agents\.py, line 3\)",
        ),
        # A dependency of the app missing is not the app missing.
        ("import requests_not_installed\n", r"ModuleNotFoundError: No module named 'requests_not_installed'"),
    ],
)
def test_an_app_that_fails_to_import_is_one_line_naming_the_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, message: str
) -> None:
    package = tmp_path / f"broken_{abs(hash(source))}"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "agents.py").write_text(source)
    with pytest.raises(
        ConfigurationError, match=rf"app module '{package.name}\.agents' cannot be imported: {message}"
    ):
        import_app(AppRef(f"{package.name}.agents", str(tmp_path)))


def test_the_cli_says_why_the_app_does_not_load_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from toolpipe.infra.cli import main

    _project(tmp_path, '[tool.toolpipe]\napp = "raising_app.agents"\n')
    (tmp_path / "raising_app").mkdir()
    (tmp_path / "raising_app" / "__init__.py").write_text("")
    (tmp_path / "raising_app" / "agents.py").write_text('raise RuntimeError("boom")\n')
    monkeypatch.chdir(tmp_path)
    for name in ("TOOLPIPE_APP", "TOOLPIPE_APP_PATH"):  # set, then unset: restored after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("TOOLPIPE_HOME", str(tmp_path / "state"))
    for argv in (["agents"], ["run", "hi"], ["--app", "my-app.agents", "agents"]):
        out, err = io.StringIO(), io.StringIO()
        assert main(argv, out, err) == 2, err.getvalue()
        # The error's one line, after the state folder `run` would use.
        lines = [
            line for line in err.getvalue().splitlines() if not line.startswith("toolpipe: state folder ")
        ]
        assert out.getvalue() == "" and len(lines) == 1, err.getvalue()
    assert not (tmp_path / "state").exists()  # nothing started


def _saved(path: Path, text: str, at_ns: int) -> None:
    path.write_text(text)
    os.utime(path, ns=(at_ns, at_ns))


def test_a_file_saved_twice_in_one_second_with_one_size_imports_its_second_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python trusts bytecode whose recorded source time (whole seconds) and size match: the app's
    is checked by hash instead, so `old` → `new` within a second is not the old code again."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "twicesaved").mkdir()
    (tmp_path / "twicesaved" / "__init__.py").write_text("")
    source = tmp_path / "twicesaved" / "agents.py"
    second = 1_700_000_000 * 10**9
    ref = AppRef("twicesaved.agents", str(tmp_path))
    try:
        _saved(source, "WORD = 'old'\n", second + 100_000_000)
        assert import_app(ref).WORD == "old"
        _saved(source, "WORD = 'new'\n", second + 600_000_000)  # the same second, the same size
        for name in ("twicesaved", "twicesaved.agents"):
            del sys.modules[name]
        assert import_app(ref).WORD == "new"
    finally:
        for name in ("twicesaved", "twicesaved.agents"):
            sys.modules.pop(name, None)
    header = Path(importlib.util.cache_from_source(str(source))).read_bytes()[:8]
    assert header[:4] == importlib.util.MAGIC_NUMBER and header[4:8] == (0b11).to_bytes(4, "little")


def test_no_bytecode_is_written_when_python_is_told_to_write_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    source = tmp_path / "quiet.py"
    source.write_text("WORD = 'x'\n")
    check_by_hash([source])
    assert not (tmp_path / "__pycache__").exists()


def test_no_bytecode_is_made_hash_based_where_python_would_never_check_the_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python --check-hash-based-pycs never` trusts a hash-based pyc unchecked: one written there
    would hide every later save, where a timestamp one is still seen as stale."""
    import _imp

    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(_imp, "check_hash_based_pycs", "never")
    source = tmp_path / "unchecked.py"
    source.write_text("WORD = 'x'\n")
    check_by_hash([source])
    assert not (tmp_path / "__pycache__").exists()
