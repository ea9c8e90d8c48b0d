"""The README's "Defining tools" examples run as written."""

import re
from pathlib import Path

import pytest

from shared.agents import AGENTS

README = Path(__file__).resolve().parents[2] / "README.md"


def test_defining_tools_examples_run(monkeypatch: pytest.MonkeyPatch) -> None:
    text = README.read_text()
    section = text[text.index("## Defining tools") : text.index("## The REST API")]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) >= 4
    monkeypatch.setattr("shared.agents.AGENTS", dict(AGENTS))  # the example registers an agent
    namespace: dict[str, object] = {"__name__": "readme"}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    assert "shop" in namespace["AGENTS"]  # type: ignore[operator]
