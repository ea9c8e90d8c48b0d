"""Each function's cold start builds what it keeps (imports, settings, clients' factories) with
the cyclic collector paused, then frozen: no collection walks it, then or later (shared/collector.py).

Each case runs in a fresh interpreter, as Lambda's cold start does.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.functional.test_tracing import FUNCTION_ENV
from toolpipe.infra.cdk.functions import FUNCTIONS

ROOT = Path(__file__).resolve().parents[2]

COUNTED_IMPORT = """
import gc
passes = []
gc.callbacks.append(lambda phase, info: phase == "start" and passes.append(info["generation"]))
frozen_before = gc.get_freeze_count()
import {module}
print(sorted(set(passes)), gc.get_freeze_count() - frozen_before, gc.isenabled())
"""


@pytest.mark.parametrize("module", sorted({spec.module for spec in FUNCTIONS.values()}))
def test_a_cold_import_runs_no_full_collection_and_freezes_what_it_built(module: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", COUNTED_IMPORT.format(module=module)],
        env=FUNCTION_ENV,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    generations, frozen, enabled = out.stdout.split("] ")[0] + "]", *out.stdout.split("] ")[1].split()
    # Without the pause, an import this size runs full (generation 2) passes over its heap.
    assert "2" not in generations, generations
    assert int(frozen) > 50_000  # modules, classes, models: out of every later pass
    assert enabled == "True"
