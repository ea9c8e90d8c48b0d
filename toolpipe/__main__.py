"""`python -m toolpipe …`: the `toolpipe` command."""

import sys

from toolpipe.infra.cli import main

sys.exit(main())
