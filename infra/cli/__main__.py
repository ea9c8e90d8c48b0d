"""`python -m toolpipe.infra.cli …`: the `toolpipe` command (how a client starts a server)."""

import sys

from toolpipe.infra.cli.entry import main

sys.exit(main())
