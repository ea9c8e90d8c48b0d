"""`toolpipe init`'s files, and the example project made of them."""

from pathlib import Path

import pytest

from toolpipe.infra.cli.scaffold import ScaffoldError, init_project, package_name, project_files

ROOT = Path(__file__).resolve().parents[4]


def test_the_example_project_is_a_scaffolded_one() -> None:
    # examples/assistant is `toolpipe init --package assistant` with its own agents and tests.
    example = ROOT / "examples" / "assistant"
    for name, text in project_files("assistant", with_example=False, taken_ok=True).items():
        if name in ("README.md", "assistant/__init__.py"):
            continue  # its own words
        if name == "cdk_app.py":  # the same call, with what its send_email tool needs added
            assert (
                'synth("Assistant", agents="assistant.agents", extend=allow_email)'
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


def test_the_dependency_names_where_toolpipe_came_from_never_the_bare_name() -> None:
    # `toolpipe` on PyPI is another project: a bare name would install a stranger's code.
    text = project_files("weather", source="file:///src/toolpipe")["pyproject.toml"]
    assert 'dependencies = ["toolpipe @ file:///src/toolpipe"]' in text
    assert '"toolpipe[local] @ file:///src/toolpipe"' in text
    assert '"toolpipe"' not in text and '"toolpipe[local]"' not in text
