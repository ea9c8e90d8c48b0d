"""The README's "Defining tools" examples run as written."""

import re
from pathlib import Path
from types import ModuleType

from toolpipe.shared.agents.app import agents_of

README = Path(__file__).resolve().parents[2] / "README.md"


def test_defining_tools_examples_run() -> None:
    text = README.read_text()
    section = text[text.index("## Defining tools") : text.index("## The REST API")]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) >= 4
    app = ModuleType("readme")  # the blocks, in order, as one app module
    for block in blocks:
        exec(compile(block, str(README), "exec"), vars(app))
    # As an app module: its top-level agents are what a deployment registers.
    assert [agent.name for agent in agents_of(app)] == ["shop", "billing", "front_desk", "docs"]


def test_the_readme_imports_toolpipe_never_its_top_level_folders() -> None:
    # Installed, toolpipe puts one package on the path: `shared`, `infra` or `functions` would
    # be a project's own (or nothing).
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    imports = [line for b in blocks for line in b.splitlines() if re.match(r"\s*(from|import) \w", line)]
    assert imports and not [
        line for line in imports if re.match(r"\s*(from|import) (shared|infra|functions)\b", line)
    ]


def test_every_public_name_resolves() -> None:
    import toolpipe
    import toolpipe.cdk
    import toolpipe.testing

    for module in (toolpipe, toolpipe.cdk, toolpipe.testing):
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{module.__name__}.{name}"


def test_the_defining_tools_examples_pass_the_projects_own_checks(tmp_path: Path) -> None:
    # Copied into a project, they must pass what `make test` holds code to: ruff and mypy --strict.
    import subprocess
    import sys

    from mypy import api

    text = README.read_text()
    section = text[text.index("## Defining tools") : text.index("## The REST API")]
    example = tmp_path / "readme_example.py"
    example.write_text("\n\n".join(re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)))
    root = README.parent
    stdout, stderr, status = api.run(
        ["--strict", "--follow-imports=silent", "--config-file", str(root / "pyproject.toml"), str(example)]
    )
    assert status == 0, stdout + stderr
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--config", str(root / "pyproject.toml"),
         "--ignore", "E402,I001,F811", str(example)],
        capture_output=True, text=True,
    )  # fmt: skip
    # (E402, I001, F811: the blocks are one file here, each with its own imports.)
    assert lint.returncode == 0, lint.stdout
