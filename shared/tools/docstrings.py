"""Docstring parsing: a tool's docstring is prompt text. Google, Sphinx (reST) and NumPy
styles; the first paragraph is the description, parameter sections describe arguments."""

import inspect
import re
from dataclasses import dataclass, field

_GOOGLE_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Returns|Return|Raises|Yields|Examples?|Notes?):\s*$"
)
_GOOGLE_ARG = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+):\s*(.*)$")
_SPHINX_FIELD = re.compile(r"^:\w+")
_NUMPY_UNDERLINE = re.compile(r"^-{3,}\s*$")
_NUMPY_ARG = re.compile(r"^(\w+)\s*(?::.*)?$")


@dataclass(frozen=True)
class ParsedDocstring:
    description: str
    params: dict[str, str] = field(default_factory=dict)


def _join(lines: list[str]) -> str:
    return " ".join(" ".join(lines).split())


def parse_docstring(doc: str | None) -> ParsedDocstring:
    if not doc:
        return ParsedDocstring(description="")
    lines = inspect.cleandoc(doc).splitlines()
    if any(_SPHINX_PARAM.match(line.strip()) for line in lines):
        return _sphinx(lines)
    if any(_NUMPY_UNDERLINE.match(line.strip()) for line in lines):
        return _numpy(lines)
    return _google(lines)


def _google(lines: list[str]) -> ParsedDocstring:
    description: list[str] = []
    params: dict[str, list[str]] = {}
    section: str | None = None
    current: str | None = None
    for raw in lines:
        line = raw.strip()
        match = _GOOGLE_SECTION.match(line)
        if match:
            section, current = match.group(1), None
            continue
        if section is None:
            description.append(line)
        elif section in ("Args", "Arguments", "Parameters") and line:
            indent = len(raw) - len(raw.lstrip())
            arg = _GOOGLE_ARG.match(line)
            if arg and (current is None or indent <= 4):
                current = arg.group(1).lstrip("*")
                params[current] = [arg.group(2)]
            elif current is not None:
                params[current].append(line)
    return ParsedDocstring(_join(description), {k: _join(v) for k, v in params.items()})


def _sphinx(lines: list[str]) -> ParsedDocstring:
    description: list[str] = []
    params: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in lines:
        line = raw.strip()
        match = _SPHINX_PARAM.match(line)
        if match:
            current = params.setdefault(match.group(1), [])
            current.append(match.group(2))
        elif _SPHINX_FIELD.match(line):
            current = None  # :type:, :returns:, :raises: ...
        elif current is not None and line:
            current.append(line)
        elif not params and current is None:
            description.append(line)
    return ParsedDocstring(_join(description), {k: _join(v) for k, v in params.items()})


def _numpy(lines: list[str]) -> ParsedDocstring:
    description: list[str] = []
    params: dict[str, list[str]] = {}
    section: str | None = None
    current: str | None = None
    for index, raw in enumerate(lines):
        line = raw.strip()
        following = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if _NUMPY_UNDERLINE.match(following) and line:
            section, current = line, None
            continue
        if _NUMPY_UNDERLINE.match(line):
            continue
        if section is None:
            description.append(line)
        elif section == "Parameters" and line:
            if raw == raw.lstrip() and (arg := _NUMPY_ARG.match(line)):
                current = arg.group(1)
                params[current] = []
            elif current is not None:
                params[current].append(line)
    return ParsedDocstring(_join(description), {k: _join(v) for k, v in params.items()})
