"""The local runtime as the benchmarks run it: the scripted model's settings, and quotas off.

A benchmark starts hundreds of runs a minute as the one local caller, so the per-caller quotas
(docs/concepts/limits.md "Quotas": 60 starts a minute and 20 running by default) would refuse
its own runs. Its runs are nobody's quota: they are turned off the way a deployer turns them
off, `TOOLPIPE_QUOTA_STARTS_PER_MINUTE=0` and `TOOLPIPE_QUOTA_RUNNING=0` in the API function's
environment, which `extra_env` sets because the template names them there. The stack's
defaults, and so every user's quotas, stay as they are.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolpipe.infra.local.runtime import LocalRuntime

MODEL = "scripted"
QUOTAS_OFF = {"TOOLPIPE_QUOTA_STARTS_PER_MINUTE": "0", "TOOLPIPE_QUOTA_RUNNING": "0"}


def bench_env(base_url: str) -> dict[str, str]:
    """The functions' extra environment: the scripted model at `base_url`, quotas off."""
    return {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "scripted", "TOOLPIPE_MODEL": MODEL, **QUOTAS_OFF}


def bench_runtime(base_url: str, **kwargs: Any) -> "LocalRuntime":
    """A `LocalRuntime` (not started) on the scripted model at `base_url`, quotas off."""
    # Imported here: the callers set the log level first, which the handlers read at import.
    from toolpipe.infra.local.runtime import LocalRuntime

    return LocalRuntime(extra_env=bench_env(base_url), **kwargs)
