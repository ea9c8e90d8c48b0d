"""Each function's cold start builds what it keeps (imports, settings, the API's routes) with the
cyclic collector paused: no full pass walks it. On Lambda it is then frozen, as it lasts the
execution environment's life; elsewhere (the local runtime, a test) nothing is frozen, so no
garbage waiting then is kept for good (shared/collector.py).

Each case runs in a fresh interpreter, as Lambda's cold start does.
"""

from pathlib import Path

import pytest

from tests.functional.test_tracing import FUNCTION_ENV, run_python
from toolpipe.infra.cdk.functions import FUNCTIONS
from toolpipe.shared.collector import ON_LAMBDA

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted({spec.module for spec in FUNCTIONS.values()})
# Where Lambda runs the code; tracing off, as in the stack's `-c tracing=false`, so X-Ray stays out.
LAMBDA = {
    ON_LAMBDA: str(ROOT),
    "AWS_LAMBDA_FUNCTION_NAME": "toolpipe-fn",
    "POWERTOOLS_TRACE_DISABLED": "true",
}

COUNTED_IMPORT = """
import gc
passes = []
gc.callbacks.append(lambda phase, info: phase == "start" and passes.append(info["generation"]))
frozen_before = gc.get_freeze_count()
import {module}
print(2 in passes, gc.get_freeze_count() - frozen_before, gc.isenabled())
"""


def counted_import(module: str, env: dict[str, str]) -> tuple[bool, int, bool]:
    full_pass, frozen, enabled = run_python(COUNTED_IMPORT.format(module=module), env).split()
    return full_pass == "True", int(frozen), enabled == "True"


@pytest.mark.parametrize("module", MODULES)
def test_on_lambda_a_cold_import_runs_no_full_pass_and_freezes_what_it_built(module: str) -> None:
    full_pass, frozen, enabled = counted_import(module, {**FUNCTION_ENV, **LAMBDA})
    assert not full_pass  # without the pause, an import this size runs full passes over its heap
    assert frozen > 50_000  # modules, classes, models: out of every later pass
    assert enabled


@pytest.mark.parametrize("module", MODULES)
def test_elsewhere_a_handlers_import_runs_no_full_pass_and_freezes_nothing(module: str) -> None:
    full_pass, frozen, enabled = counted_import(module, FUNCTION_ENV)
    assert not full_pass
    assert frozen == 0
    assert enabled
