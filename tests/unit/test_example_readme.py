"""The example project's README and module docstring count and name its assistant's tools as
the code defines them (they once said four when there were six)."""

import re
from pathlib import Path

from assistant import agents

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "assistant"
NUMBERS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
# "An agent with six tools (`sum`, …, and `ask_user`, which a person answers)"
COUNTED = re.compile(r"with (\w+) tools(?: \(([^)]*)\))?")


def _counted(text: str) -> tuple[str, list[str]]:
    """The number a text gives of the tools, and the tools it names in parentheses after it."""
    match = COUNTED.search(text)
    assert match, f"no 'with N tools' in: {text[:200]}"
    return match.group(1), re.findall(r"`(\w+)`", match.group(2) or "")


def test_the_readme_counts_and_names_the_assistants_tools() -> None:
    tools = [tool.name for tool in agents.assistant.tools]
    number, named = _counted((EXAMPLE / "README.md").read_text())
    assert number == NUMBERS[len(tools)]
    assert sorted(named) == sorted(tools)


def test_the_apps_docstring_counts_them_too() -> None:
    number, _ = _counted(agents.__doc__ or "")
    assert number == NUMBERS[len(agents.assistant.tools)]
