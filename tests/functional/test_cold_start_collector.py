"""Each function's cold start builds what it keeps (imports, settings, the API's routes, and at
its first call its clients and the orchestrator's `openai`) with the cyclic collector paused: no
full pass walks it. On Lambda it is then frozen, as it lasts the execution environment's life;
so it is while a local runtime is up, whose stop gives it back; elsewhere (a test) nothing is
frozen, so no garbage waiting then is kept for good (shared/collector.py). And a cold start
with tracing off loads no tracing package (tests/functional/test_tracing.py: with it on).

Each case runs in a fresh interpreter, as Lambda's cold start does; one interpreter holds every
fact of one function's cold start where it is.
"""

import gc
import json
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from benchmarks.coldstart import FIRST_CALL, function_env
from benchmarks.loops import turns_responder
from benchmarks.runtime import bench_runtime
from tests.functional.test_tracing import FUNCTION_ENV, run_python
from toolpipe.infra.cdk.functions import FUNCTIONS
from toolpipe.infra.local.scripted_model import ScriptedModelServer
from toolpipe.shared import collector
from toolpipe.shared.collector import ON_LAMBDA

MODULES = sorted({spec.module for spec in FUNCTIONS.values()})


@dataclass(frozen=True)
class ColdStart:
    """What a cold start did in a fresh interpreter: a module's import, then a function's first
    call's builders (`benchmarks.coldstart` names them). Each phase: whether the collector ran
    a full pass of its own (only while it is on: a `gc.collect()` in a paused block is the
    code's own, before it freezes), how many objects it left frozen, whether it is on after."""

    import_full_pass: bool
    import_frozen: int
    enabled_after_import: bool
    # The tracing packages loaded once the handler is imported (X-Ray's, OpenTelemetry's SDK and
    # exporters): what a cold start pays for tracing that is off.
    tracing_loaded: list[str]
    first_call_full_pass: bool
    first_call_frozen: int
    enabled_after_first_call: bool


# One interpreter for every fact of a cold start: each is a fresh interpreter's second or so of
# CPU, and these were seven a function.
COLD_START = """
import gc, json, sys
phase = ["import"]
passes = {{"import": [], "first call": []}}
def counted(at, info):
    if at == "start" and gc.isenabled():
        passes[phase[0]].append(info["generation"])
gc.callbacks.append(counted)
frozen = gc.get_freeze_count()
import {module} as handler
imported = gc.get_freeze_count()
enabled = gc.isenabled()
loaded = sorted(
    m for m in sys.modules
    if m.split(".")[0] == "aws_xray_sdk" or m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))
)
phase[0] = "first call"
{first_call}
print(json.dumps([2 in passes["import"], imported - frozen, enabled, loaded,
                  2 in passes["first call"], gc.get_freeze_count() - imported, gc.isenabled()]))
"""


def cold_start(module: str, env: dict[str, str], first_call: Sequence[str] = ()) -> ColdStart:
    code = COLD_START.format(module=module, first_call="\n".join(first_call))
    return ColdStart(*json.loads(run_python(code, env)))


def function_cold_start(name: str, env: dict[str, str]) -> ColdStart:
    return cold_start(FUNCTIONS[name].module, env, FIRST_CALL[name])


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_on_lambda_a_cold_start_runs_no_full_pass_freezes_what_it_built_and_loads_no_tracing(
    name: str,
) -> None:
    """On Lambda, tracing off (the stack's `-c tracing=false`) and no OTLP endpoint: the import
    and the first call (clients, and the orchestrator's `openai`: 366 -> 314 ms of CPU) run no
    full pass and are frozen, out of the passes of every invocation after; no X-Ray, no
    OpenTelemetry SDK is loaded (run spans cost nothing then: shared/telemetry)."""
    started = function_cold_start(name, function_env(tracing=False, spec=FUNCTIONS[name]))
    assert not started.import_full_pass  # without the pause, an import this size runs full passes
    assert started.import_frozen > 50_000  # modules, classes, models: out of every later pass
    assert started.enabled_after_import
    assert started.tracing_loaded == []
    assert not started.first_call_full_pass
    assert started.first_call_frozen > 1_000  # a boto3 client's service model alone is thousands
    assert started.enabled_after_first_call


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_elsewhere_a_cold_start_runs_no_full_pass_freezes_nothing_and_loads_no_tracing(name: str) -> None:
    """Outside Lambda (a test), with no tracing setting at all: nothing is frozen, and neither
    X-Ray nor OpenTelemetry's SDK is loaded."""
    lambda_only = (ON_LAMBDA, "AWS_LAMBDA_FUNCTION_NAME", "POWERTOOLS_TRACE_DISABLED")
    env = {k: v for k, v in function_env(tracing=False, spec=FUNCTIONS[name]).items() if k not in lambda_only}
    started = function_cold_start(name, env)
    assert not started.import_full_pass
    assert started.import_frozen == 0
    assert started.enabled_after_import
    assert started.tracing_loaded == []
    assert not started.first_call_full_pass
    assert started.first_call_frozen == 0
    assert started.enabled_after_first_call


def test_importing_the_local_runtime_runs_no_pass_of_the_collectors_own_and_keeps_it_on() -> None:
    """`toolpipe serve`, `toolpipe run` and `LocalPipeline` import it first: two full passes
    were ~100 ms of a ~520 ms import."""
    started = cold_start("toolpipe.infra.local.runtime", FUNCTION_ENV)
    assert not started.import_full_pass
    assert started.import_frozen > 50_000
    assert started.enabled_after_import


def test_a_local_runtime_keeps_its_functions_cold_starts_and_gives_them_back_at_stop() -> None:
    with ScriptedModelServer(turns_responder) as model, bench_runtime(model.base_url) as runtime:
        started = gc.get_freeze_count()
        status, body = runtime.api("POST", "/runs", {"input": "Count up. 0", "agent": "tester"})
        assert status == 202, body
        assert runtime.wait_for_execution(body["run_id"])["status"] == "SUCCEEDED"
        # The functions' first calls built their services (the model step's `openai` client).
        assert gc.get_freeze_count() > started
        assert gc.isenabled()
    assert gc.get_freeze_count() == 0  # given back
    # Stopped: a cold start in this process is only paused again, as anywhere but on Lambda.
    with collector.cold_start():
        built = [object() for _ in range(100)]
    assert built and gc.get_freeze_count() == 0


PLAIN_CACHES = """
import functools, importlib, json
from toolpipe.functions.api.services import ApiServices
from toolpipe.shared import collector

COLD_BUILT = collector.cold_built(lambda: None).__wrapped__.__code__

def plain(namespace):
    found = []
    for name, value in namespace.items():
        if isinstance(value, functools.cached_property) and not isinstance(value, collector.cold_property):
            found.append(name)
        wrapped = getattr(value, "__wrapped__", None)
        if hasattr(value, "cache_clear") and getattr(wrapped, "__code__", None) is not COLD_BUILT:
            found.append(name)
    return found

found = {{name: plain(vars(importlib.import_module(name))) for name in {modules!r}}}
found["ApiServices"] = plain(vars(ApiServices))
found["a plain cache, to see the check sees one"] = plain({{"service": functools.cache(lambda: None)}})
print(json.dumps(found))
"""


def test_every_service_a_handler_builds_at_its_first_use_is_built_as_its_cold_start() -> None:
    """The first-call tests above run the builders `benchmarks.coldstart` names; the rest (the
    orchestrator's approvals, the API's timeline...) are held here by how they are declared."""
    found = json.loads(run_python(PLAIN_CACHES.format(modules=MODULES), FUNCTION_ENV))
    assert found.pop("a plain cache, to see the check sees one") == ["service"]
    assert found == {name: [] for name in found} and len(found) == len(MODULES) + 1


def test_importing_the_local_runtime_frees_the_importers_garbage_rather_than_freezing_it() -> None:
    """A project's test process imports it (`toolpipe.testing`) with garbage of its own waiting."""
    code = """
import gc, weakref
class Cycle: pass
a, b = Cycle(), Cycle()
a.other, b.other = b, a
waiting = weakref.ref(a)
gc.collect()  # old now: only a full pass frees it once it is dropped
del a, b
import toolpipe.infra.local.runtime
print(waiting() is None, gc.get_freeze_count() > 0)
"""
    assert run_python(code, FUNCTION_ENV) == "True True"
