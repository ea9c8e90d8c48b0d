"""`python -m toolpipe.infra.cli …`: the `toolpipe` command (how a client starts a server)."""

from toolpipe.infra.cli.entry import program

program()
