"""The docs site and the README: their examples run as written, their links resolve, the site
builds with --strict (a broken link or anchor fails), and the README stays short."""

import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from toolpipe.shared.agents.app import agents_of

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
SNIPPETS = DOCS / "snippets"
# The Tools, Agents and Handoff pages' examples: one app module, read in this order.
TOOL_SNIPPETS = [
    SNIPPETS / "tools" / name
    for name in (
        "typed_function.py",
        "context.py",
        "schema_tool.py",
        "wire_names.py",
        "type_names.py",
        "strict_tools.py",
        "agents.py",
        "handoff.py",
        "mcp_servers.py",
    )
]
# A snippet shown on a page: its marker (invisible once rendered), then a fenced block of its code.
SHOWN = re.compile(
    r"^<!-- (docs/snippets/\S+): the block below is this file, which the tests use -->\n```\w*\n(.*?)^```$",
    re.MULTILINE | re.DOTALL,
)


def _pages() -> list[Path]:
    return [p for p in DOCS.rglob("*.md") if SNIPPETS not in p.parents]


def test_the_tool_snippets_run_as_one_app_module() -> None:
    app = ModuleType("docs_tools")  # the snippets, in order, as one app module
    for snippet in TOOL_SNIPPETS:
        exec(compile(snippet.read_text(), str(snippet), "exec"), vars(app))
    # As an app module: its top-level agents are what a deployment registers.
    assert [agent.name for agent in agents_of(app)] == ["shop", "billing", "front_desk", "docs"]


def test_the_approval_policies_example_declares_what_it_says() -> None:
    snippet = SNIPPETS / "approval_policies.py"
    namespace: dict[str, Any] = {"__name__": "docs"}
    exec(compile(snippet.read_text(), str(snippet), "exec"), namespace)  # its asserts run too
    assert namespace["delete_account"].requires_approval is True
    assert callable(namespace["refund"].requires_approval)


def test_every_snippet_is_shown_whole_on_a_page_as_the_file_the_tests_run() -> None:
    """A page shows each example's code itself: an include line (`--8<-- "docs/snippets/…"`) is
    what a forge showed of it, where the code a reader is told to paste should be (issue 33,
    item 10). The block under a snippet's marker must be that file, which the tests run."""
    shown: set[str] = set()
    for page in _pages():
        text = page.read_text()
        assert "--8<--" not in text, f"{page}: an include line shows as itself on a forge"
        for path, block in SHOWN.findall(text):
            assert block == (ROOT / path).read_text(), f"{page}: the block under {path} is not that file"
            shown.add(path)
    snippets = {
        p.relative_to(ROOT).as_posix() for p in SNIPPETS.rglob("*") if p.is_file() and p.suffix != ".pyc"
    }
    assert shown == snippets, shown ^ snippets


def test_the_docs_import_toolpipe_never_its_top_level_folders() -> None:
    # Installed, toolpipe puts one package on the path: `shared`, `infra` or `functions` would
    # be a project's own (or nothing).
    texts = [p.read_text() for p in SNIPPETS.rglob("*.py")]
    texts += [b for p in [README, *_pages()] for b in re.findall(r"```python\n(.*?)```", p.read_text(), re.S)]
    imports = [line for t in texts for line in t.splitlines() if re.match(r"\s*(from|import) \w", line)]
    assert len(imports) > 20 and not [
        line for line in imports if re.match(r"\s*(from|import) (shared|infra|functions)\b", line)
    ]


def test_every_public_name_resolves() -> None:
    import toolpipe
    import toolpipe.cdk
    import toolpipe.testing

    for module in (toolpipe, toolpipe.cdk, toolpipe.testing):
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{module.__name__}.{name}"


def test_the_tool_snippets_pass_the_projects_own_checks(tmp_path: Path) -> None:
    # Copied into a project, they must pass what `make test` holds code to: ruff and mypy --strict.
    from mypy import api

    example = tmp_path / "docs_tools.py"
    example.write_text("\n\n".join(p.read_text() for p in TOOL_SNIPPETS))
    # The project's own options (strict), nothing added: mypy then reads what `make lint`'s run
    # left in .mypy_cache (0.5 s here, against 8 s with options of its own, which miss it).
    stdout, stderr, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), str(example)])
    assert status == 0, stdout + stderr
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--config", str(ROOT / "pyproject.toml"),
         "--ignore", "E402,I001,F811", str(example)],
        capture_output=True, text=True,
    )  # fmt: skip
    # (E402, I001, F811: the snippets are one file here, each with its own imports.)
    assert lint.returncode == 0, lint.stdout


def test_the_readme_is_at_most_300_lines_and_its_relative_links_resolve() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [link.split("#")[0] for link in links if not re.match(r"[a-z]+:|#", link)]
    assert len(relative) >= 10  # the table of links into the site
    assert [link for link in relative if not (ROOT / link).is_file()] == []


def test_the_readme_example_is_the_snippet_a_test_runs() -> None:
    # The README is read on GitHub as it is, as the pages are on a forge: its example must equal the
    # snippet tests/e2e/test_docs_examples.py runs.
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert (SNIPPETS / "quickstart.py").read_text() in blocks


def test_the_site_builds_strict(tmp_path: Path) -> None:
    """`mkdocs build --strict`: a broken link, anchor or nav entry fails it."""
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    assert (tmp_path / "site" / "tutorials" / "first-tool-offline" / "index.html").is_file()


def test_a_broken_anchor_fails_the_strict_build(tmp_path: Path) -> None:
    """The site's validation settings make a link to a missing heading a warning, which --strict fails on."""
    import shutil

    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path)
    with (tmp_path / "docs" / "index.md").open("a") as page:
        page.write("\n[gone](concepts/runs.md#no-such-heading)\n")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert built.returncode != 0 and "no-such-heading" in built.stderr, built.stderr
