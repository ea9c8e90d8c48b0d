"""`python -m toolpipe …`: the `toolpipe` command."""

from toolpipe.infra.cli.entry import program

program()
