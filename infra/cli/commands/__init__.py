"""One module per `toolpipe` command; `COMMANDS` maps each command's name to its function."""

import argparse
from collections.abc import Callable
from typing import TextIO

from toolpipe.infra.cli.commands.agents import agents
from toolpipe.infra.cli.commands.approvals import approvals
from toolpipe.infra.cli.commands.decide import answer, approve, deny
from toolpipe.infra.cli.commands.delete import delete
from toolpipe.infra.cli.commands.init import init
from toolpipe.infra.cli.commands.invoke import invoke
from toolpipe.infra.cli.commands.run import run
from toolpipe.infra.cli.commands.serve import serve
from toolpipe.infra.cli.commands.show import show

Command = Callable[[argparse.Namespace, TextIO, TextIO], int]  # (args, stdout, stderr) -> exit status

# One entry per command: a new command is a module, a function and a line here (and its
# arguments in infra/cli/parser.py).
COMMANDS: dict[str, Command] = {
    "init": init,
    "run": run,
    "show": show,
    "delete": delete,
    "approvals": approvals,
    "approve": approve,
    "deny": deny,
    "answer": answer,
    "agents": agents,
    "invoke": invoke,
    "serve": serve,
}

# The commands that work on a state folder (a local server's, or its saved state), unless they
# are given a deployed API (`--api`).
LOCAL_STATE_COMMANDS = frozenset(
    {"run", "show", "delete", "approvals", "approve", "deny", "answer", "invoke", "serve"}
)
