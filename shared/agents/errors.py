"""Errors of finding an agent."""

from toolpipe.shared.errors import ToolpipeError


class UnknownAgentError(ToolpipeError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown agent '{name}' (known: {', '.join(sorted(known))})")
        self.name = name
