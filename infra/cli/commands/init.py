"""`toolpipe init DIR`: a project of your own (infra/cli/scaffold.py)."""

import argparse
import shlex
from typing import TextIO

from toolpipe.infra.cli.errors import EXIT_OK, EXIT_USAGE, CommandError
from toolpipe.infra.cli.output import write_json


def init(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Write the project's files; list them on stdout, and what to do next on stderr."""
    from toolpipe.infra.cli.scaffold import ScaffoldError, init_project

    try:
        written = init_project(args.directory, args.package)
    except ScaffoldError as e:
        raise CommandError(str(e), EXIT_USAGE) from None
    if args.json:
        write_json(out, {"directory": str(args.directory), "files": [str(p) for p in written]})
        return EXIT_OK
    out.write(f"created {len(written)} files in {args.directory}:\n")
    out.writelines(f"  {path.relative_to(args.directory)}\n" for path in written)
    # The run needs no install: toolpipe loads the agents from the project's folder.
    err.write(
        f"next: cd {shlex.quote(str(args.directory))} && toolpipe run 'What is the weather in Paris?'"
        " (offline: scripted_model.yaml is the model); then make install, make test, make synth"
        " (its README.md)\n"
    )
    return EXIT_OK
