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
    assert [agent.name for agent in agents_of(app)] == ["shop", "docs"]
