"""Google-style docstring parsing: a tool's docstring is prompt text."""

import inspect
import re
from dataclasses import dataclass, field

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?):\s*$")
_ARG = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@dataclass(frozen=True)
class ParsedDocstring:
    description: str
    params: dict[str, str] = field(default_factory=dict)


def parse_docstring(doc: str | None) -> ParsedDocstring:
    if not doc:
        return ParsedDocstring(description="")
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for raw in lines:
        line = raw.strip()
        match = _SECTION.match(line)
        if match:
            section, current = match.group(1), None
            continue
        if section is None:
            description.append(line)
        elif section in ("Args", "Arguments", "Parameters") and line:
            indent = len(raw) - len(raw.lstrip())
            arg = _ARG.match(line)
            if arg and (current is None or indent <= 4):
                current = arg.group(1).lstrip("*")
                params[current] = arg.group(2).strip()
            elif current is not None:
                params[current] = f"{params[current]} {line}".strip()
    text = " ".join(" ".join(description).split())
    return ParsedDocstring(description=text, params=params)
