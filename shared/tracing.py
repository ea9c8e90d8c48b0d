"""The handlers' tracing: X-Ray, loaded only when it is on, and the run spans each invocation
made (shared/telemetry), sent before it returns, when OpenTelemetry tracing is on.

Powertools' `Tracer()` imports `aws_xray_sdk.core` whatever its settings, and that import
builds two botocore X-Ray clients (100-230 ms of a cold start measured here), even with
`POWERTOOLS_TRACE_DISABLED` set. So the decision Powertools would make is taken here first,
and the Tracer (hence X-Ray) is imported only when it would trace.
"""

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from aws_lambda_powertools.shared.functions import strtobool

from toolpipe.shared.errors import ConfigurationError
from toolpipe.shared.telemetry import TracingSettings, flush_spans

Handler = TypeVar("Handler", bound=Callable[..., Any])

# The variables Powertools' Tracer reads to decide (`Tracer._is_tracer_disabled`); a test holds
# this module's answer equal to its answer.
TRACE_DISABLED = "POWERTOOLS_TRACE_DISABLED"
_IN_LAMBDA = "LAMBDA_TASK_ROOT"
_EMULATORS = ("AWS_SAM_LOCAL", "AWS_CHALICE_CLI_MODE")


def tracing_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether Powertools' Tracer would trace here: on Lambda (not under an emulator) unless
    `POWERTOOLS_TRACE_DISABLED` is true. The stack turns it off with that variable."""
    env = os.environ if environ is None else environ
    value = env.get(TRACE_DISABLED, "false")
    try:
        disabled = strtobool(value)
    except ValueError:
        raise ConfigurationError(f"{TRACE_DISABLED} must be true or false, not {value!r}") from None
    if disabled:
        return False
    return bool(env.get(_IN_LAMBDA)) and not any(env.get(name) for name in _EMULATORS)


def trace_handler(handler: Handler) -> Handler:
    """`handler` wrapped by Powertools' `Tracer.capture_lambda_handler` when X-Ray tracing is on
    (a `## <name>` subsegment, the ColdStart and Service annotations, errors as metadata; never
    the response, which may hold tool payloads), and by a flush of its run spans when
    OpenTelemetry tracing is on (Lambda freezes the process when the handler returns: spans
    still held then are sent late or never); `handler` itself when both are off.

    Decided once, at import: the Tracer patches botocore during the init phase, before the
    handler builds its clients, as Powertools expects.
    """
    traced = handler
    if tracing_enabled():
        from aws_lambda_powertools import Tracer

        traced = cast(Handler, Tracer().capture_lambda_handler(handler, capture_response=False))
    if not TracingSettings.from_env().enabled:
        return traced
    return cast(Handler, _flushing(traced))


def _flushing(handler: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(handler)
    def flushed(*args: Any, **kwargs: Any) -> Any:
        try:
            return handler(*args, **kwargs)
        finally:
            flush_spans()

    return flushed
