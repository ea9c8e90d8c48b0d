"""`python -m toolpipe.infra.local.tool_host FD`: a local tool runner's template process.

`call_host` as the local runtime starts it (or forks it: `fork_server.py`): first the AWS calls of every call's process go to
the runtime's broker for this runner (`aws_forwarding.py`), then the app is imported and calls
are served.
"""

import os
import sys

from toolpipe.infra.local import aws_forwarding
from toolpipe.shared.runs import call_host


def main(fd: int) -> None:
    aws_forwarding.install(os.environ[aws_forwarding.LOCAL_AWS_ENV])
    call_host.main(fd)


if __name__ == "__main__":
    main(int(sys.argv[1]))
