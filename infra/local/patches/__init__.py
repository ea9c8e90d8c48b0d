"""The local runtime's patches of moto and botocore, applied once per process by `install()`.

`correctness/` holds the fixes, where moto behaves unlike AWS in a way a run notices;
`speed/` the patches that give the same answers at less cost. Each module is one patch: its
docstring says what the library does, why it matters and what the patch does, `CHECKED_WITH`
the moto versions it was checked against, and `install()` applies it. Their tests are in
tests/functional/test_moto_patches.py, test_patches.py and test_history_answers.py (a stop's:
tests/e2e/test_execution_ended.py).

They reach into moto's internals, which change between releases: the runtime refuses a moto
it was not tested with (`require_tested_moto`), and `pyproject.toml` pins the same versions.
To move to a new moto: run those tests with it, and add its version to each module's
`CHECKED_WITH` and to `TESTED_MOTO`.

Seven of them are process-wide, in botocore's own classes and functions: `speed.unsigned_in_process`,
`speed.user_agent_cache`, `speed.shared_loader`, `speed.endpoint_rules`, `speed.session_events`,
`speed.model_files` and `speed.service_listing` (docs/design/local-runtime.md). The runtime's other hooks into moto
are not patches but its own features, kept with them: handlers run in-process
(`infra/local/lambdas.py`), IAM checks of a function's calls (`iam.py`), one request at a time
(`serial.py`), the dev server's change feed (`run_changes.py`) and execution events
(`execution_events.py`).
"""

import importlib.metadata
import threading

from toolpipe.shared.errors import ConfigurationError

# The moto versions every patch was checked with (a test keeps it to their `CHECKED_WITH`).
TESTED_MOTO = ("5.2.5",)


class UntestedMotoError(ConfigurationError):
    """The installed moto is not a version the local runtime's patches of it were checked with:
    refused at start-up rather than misbehaving mid-run."""

    def __init__(self, installed: str, tested: tuple[str, ...]) -> None:
        super().__init__(
            f"moto {installed} is installed, but the local runtime is tested with moto "
            f"{' or '.join(tested)} only: `pip install 'moto=={tested[-1]}'`"
        )
        self.installed = installed
        self.tested = tested


_lock = threading.Lock()
_installed = False


def require_tested_moto() -> None:
    """Raise UntestedMotoError unless the installed moto is one the patches were checked with."""
    installed = importlib.metadata.version("moto")
    if installed not in TESTED_MOTO:
        raise UntestedMotoError(installed, TESTED_MOTO)


def install() -> None:
    """Apply every patch, once per process, after checking moto's version."""
    global _installed
    with _lock:
        if _installed:
            return
        require_tested_moto()
        # Imported here: on another moto, importing its internals may fail before the check.
        from toolpipe.infra.local.patches import correctness, speed

        for patch in (*correctness.PATCHES, *speed.PATCHES):
            patch.install()
        _installed = True
