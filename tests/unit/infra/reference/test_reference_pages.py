"""The docs site's generated reference pages (`python -m toolpipe.infra.reference.docs`): checked
in as generated, complete (every command, option, route and event), and valid Markdown for
`mkdocs build --strict` (every link and anchor resolves)."""

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from toolpipe.infra.cdk.constructs.api import ApiAuth
from toolpipe.infra.reference import docs

ROOT = Path(__file__).resolve().parents[4]


def test_the_checked_in_pages_are_the_generated_ones() -> None:
    for path, text in docs.render().items():
        assert path.is_file(), f"{path.relative_to(ROOT)} is missing: run `make reference`"
        assert path.read_text() == text, f"{path.relative_to(ROOT)} is stale: run `make reference`"


def test_every_command_and_each_of_its_options_is_on_the_cli_page() -> None:
    page = (docs.PAGES / "cli.md").read_text()
    commands = docs.cli_commands()
    assert set(commands) >= {
        "init",
        "run",
        "show",
        "approvals",
        "approve",
        "deny",
        "answer",
        "agents",
        "invoke",
        "serve",
    }
    headings = re.findall(r"^## toolpipe (\S+)$", page, re.M)
    assert headings == list(commands)
    for name, (_, parser) in commands.items():
        section = page.split(f"## toolpipe {name}\n", 1)[1].split("\n## ", 1)[0]
        for action in parser._actions:
            if action.help == argparse.SUPPRESS:
                assert not any(f"`{flag}" in section for flag in action.option_strings)  # plumbing
                continue
            for flag in action.option_strings:
                if flag not in ("-h", "--help", "--json", "--app", "--verbose"):
                    assert f"`{flag}" in section, f"{flag} of {name} is not on the page"
    # The environment the CLI reads, each with what it does.
    for variable in ("TOOLPIPE_HOME", "TOOLPIPE_API_URL", "OPENAI_BASE_URL", "TOOLPIPE_APP"):
        assert re.search(rf"^\| `{variable}` \| \S", page, re.M), variable


def test_a_variable_the_cli_reads_without_a_description_stops_the_generator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(docs.ENVIRONMENT, "TOOLPIPE_HOME")
    with pytest.raises(RuntimeError, match="infra/cli reads TOOLPIPE_HOME: describe it"):
        docs.cli_environment()
    monkeypatch.setitem(docs.ENVIRONMENT, "TOOLPIPE_HOME", "-")
    monkeypatch.setitem(docs.ENVIRONMENT, "TOOLPIPE_GONE", "-")
    with pytest.raises(RuntimeError, match="no longer reads TOOLPIPE_GONE"):
        docs.cli_environment()


def test_the_page_does_not_depend_on_the_environment_it_was_generated_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TOOLPIPE_API_URL", "https://example.test/v1/")
    monkeypatch.setenv("TOOLPIPE_API_KEY", "secret-key")
    page = docs.cli_page()
    assert "example.test" not in page and "secret-key" not in page
    assert page == (docs.PAGES / "cli.md").read_text()


def test_every_route_and_schema_of_the_openapi_document_is_on_the_rest_api_page() -> None:
    document = json.loads(docs.OPENAPI.read_text())
    page = (docs.PAGES / "rest-api.md").read_text()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            section = page.split(f"### {method.upper()} {path}\n", 1)[1].split("\n### ", 1)[0]
            for status in operation["responses"]:
                assert f"| `{status}` |" in section, (method, path, status)
            for parameter in operation.get("parameters", []):
                assert f"| `{parameter['name']}` | {parameter['in']} |" in section, (method, path, parameter)
    for name, schema in document["components"]["schemas"].items():
        section = page.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0]
        for field in schema.get("properties", {}):
            assert f"| `{field}` |" in section, (name, field)
    assert "[openapi.json](../openapi.json)" in page


def test_the_auth_modes_described_are_the_constructs() -> None:
    assert set(docs.AUTH_MODES) == {mode.value for mode in ApiAuth}


def test_every_event_and_field_is_on_the_events_page_with_its_schema() -> None:
    page = (docs.PAGES / "events.md").read_text()
    files = sorted(docs.EVENTS.glob("*.json"))
    assert {f.stem for f in files} >= {"RunStarted", "RunCompleted", "ApprovalRequested", "RunRequested"}
    for file in files:
        section = page.split(f"## {file.stem}\n", 1)[1].split("\n## ", 1)[0]
        assert f"[{file.name}](../events/{file.name})" in section
        schema = json.loads(file.read_text())
        for field in schema["properties"]:
            required = "yes" if field in schema.get("required", []) else "no"
            assert re.search(rf"^\| `{field}` \| .+ \| {required} \|", section, re.M), (file.stem, field)


@pytest.mark.parametrize(
    ("text", "cell"),
    [
        ("a | b", "a \\| b"),
        ("mcp_<tool> and *all*", "mcp_&lt;tool&gt; and \\*all\\*"),
        ("`<kept>` in code, `a|b` too", "`<kept>` in code, `a|b` too"),
        ("an unclosed ` <b>", "an unclosed \\` &lt;b&gt;"),
        ("two\nlines", "two lines"),
    ],
)
def test_a_cell_stays_one_cell_and_shows_what_it_says(text: str, cell: str) -> None:
    assert docs.cell(text) == cell


def test_the_pages_build_with_mkdocs_strict_every_link_and_anchor_resolving(tmp_path: Path) -> None:
    site = tmp_path / "docs"
    (site / "reference").mkdir(parents=True)
    for path, text in docs.render().items():
        (site / "reference" / path.name).write_text(text)
    (site / "events").mkdir()
    for file in docs.EVENTS.glob("*.json"):
        (site / "events" / file.name).write_text(file.read_text())
    (site / "openapi.json").write_text(docs.OPENAPI.read_text())
    (site / "index.md").write_text("# Reference\n")
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: reference\n"
        "markdown_extensions: [toc, tables]\n"
        "validation: {links: {not_found: warn, anchors: warn, unrecognized_links: warn}}\n"
        "nav: [index.md, reference/cli.md, reference/rest-api.md, reference/events.md]\n"
    )
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "reference" / "rest-api" / "index.html").read_text().count("<table>") > 20
