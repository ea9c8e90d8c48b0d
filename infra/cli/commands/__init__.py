"""One module per `toolpipe` command; `COMMANDS` maps each command's name to its function."""

import argparse
import importlib
from collections.abc import Callable
from typing import TextIO

Command = Callable[[argparse.Namespace, TextIO, TextIO], int]  # (args, stdout, stderr) -> exit status


def _command(module: str, function: str | None = None) -> Command:
    """The command `function` (default: the module's name) of `commands/<module>.py`, imported
    when it runs: `toolpipe show` on a stopped folder answers in a fraction of a second, and
    must not pay first for `run`'s or `serve`'s imports (the agents, the tools, moto)."""

    def command(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
        found: Command = getattr(importlib.import_module(f"{__name__}.{module}"), function or module)
        return found(args, out, err)

    return command


# One entry per command: a new command is a module, a function and a line here (and its
# arguments in infra/cli/parser.py).
COMMANDS: dict[str, Command] = {
    "init": _command("init"),
    "run": _command("run"),
    "show": _command("show"),
    "delete": _command("delete"),
    "resume": _command("resume"),
    "fork": _command("fork"),
    "approvals": _command("approvals"),
    "approve": _command("decide", "approve"),
    "deny": _command("decide", "deny"),
    "answer": _command("decide", "answer"),
    "agents": _command("agents"),
    "invoke": _command("invoke"),
    "serve": _command("serve"),
    "status": _command("status"),
    "stop": _command("status", "stop"),
}

# The commands that work on a state folder (a local server's, or its saved state), unless they
# are given a deployed API (`--api`).
LOCAL_STATE_COMMANDS = frozenset(
    {
        "run",
        "show",
        "delete",
        "resume",
        "fork",
        "approvals",
        "approve",
        "deny",
        "answer",
        "invoke",
        "serve",
        "status",
        "stop",
    }
)
