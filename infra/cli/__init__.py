"""The `toolpipe` command: `init`, `run`, `show`, `delete`, `approvals`, `approve`, `deny`,
`answer`, `agents`, `invoke` and `serve`, on the local runtime or a deployed stack's API.

`serve` holds the runtime in one long-lived process and answers HTTP (infra/local/server.py).
The other commands that talk to the runs API are its clients, through a `Session`
(`session.py`): the server serving the state folder, found or started for their own duration
(`discovery.py`), or with `--api` a deployed stack's API (`remote.py`). `show` and `approvals`
read a stopped folder's saved state in their own process instead (`offline.py`).

Modules: `entry` (`main`: errors to exit statuses), `parser` and `arguments` (the command line),
`commands/` (one module per command), `output` (how everything is written), `errors`.

Conventions every command keeps (README "The CLI"): what the command was asked for goes to
stdout, everything else (banners, warnings, errors) to stderr, and logs to the state folder's
`toolpipe.log`; `--json` makes stdout one JSON document; exit 0 ok, 1 failed, 2 usage; input
is checked before anything starts; no traceback reaches the terminal.
"""

from toolpipe.infra.cli.entry import main

__all__ = ["main"]
