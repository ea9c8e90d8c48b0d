"""The exit statuses every command keeps, and the error a command stops with."""

from typing import Any

# Exit statuses (README "The CLI", and every command's --help).
EXIT_OK = 0
EXIT_FAILED = 1  # the run failed, or the thing asked for could not be done
EXIT_USAGE = 2  # bad flags or input, an unknown agent: argparse's own status for its errors
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as a shell reports it
# The reader of stdout went away (`toolpipe show ID | head -1`): 128 + SIGPIPE, what a shell
# reports for any program stopped that way, so `set -o pipefail` scripts see what they expect
# and it is not taken for a failed run.
EXIT_BROKEN_PIPE = 141


class CommandError(Exception):
    """What a command could not do, as the one line the user reads, with its exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def reason(body: Any) -> str:
    """The API's message in an error body (or the body itself when it has none)."""
    return str(body.get("message", body) if isinstance(body, dict) else body)


def refused(status: int, body: Any) -> CommandError:
    """The server's refusal as the command's error: a 4xx is the request's fault (usage)."""
    return CommandError(reason(body), EXIT_USAGE if 400 <= status < 500 else EXIT_FAILED)
