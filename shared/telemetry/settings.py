"""Whether this process traces, read the standard OpenTelemetry way.

Tracing is on when an OTLP endpoint is set (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
`OTEL_EXPORTER_OTLP_ENDPOINT`), unless `OTEL_SDK_DISABLED` is true or `OTEL_TRACES_EXPORTER` is
`none`. The exporter reads the rest itself (headers, timeout, `OTEL_SERVICE_NAME`...).
Prompts, replies, arguments and results go into spans only when
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` is true, as OpenTelemetry's GenAI
instrumentations read it.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass

from toolpipe.shared.errors import ConfigurationError

ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_DISABLED = "OTEL_SDK_DISABLED"
_EXPORTER = "OTEL_TRACES_EXPORTER"
_PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
# The exporter toolpipe ships: OTLP over HTTP with protobuf bodies (no gRPC in the layer).
_PROTOCOL = "http/protobuf"


@dataclass(frozen=True)
class TracingSettings:
    enabled: bool = False
    capture_content: bool = False
    # Where spans are posted: the traces endpoint as given, or the base endpoint's `/v1/traces`
    # (as the OTLP exporter specification builds it).
    endpoint: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "TracingSettings":
        env = os.environ if environ is None else environ
        endpoint = env.get(TRACES_ENDPOINT) or env.get(ENDPOINT)
        exporters = {e.strip().lower() for e in env.get(_EXPORTER, "otlp").split(",")}
        enabled = bool(endpoint) and not _true(env, _DISABLED) and exporters != {"none"}
        if enabled:
            for name in _PROTOCOLS:
                protocol = env.get(name, "").strip().lower()
                if protocol and protocol != _PROTOCOL:
                    raise ConfigurationError(
                        f"{name} must be {_PROTOCOL} (toolpipe's exporter), not {protocol!r}"
                    )
        return cls(
            enabled=enabled,
            capture_content=enabled and _true(env, CAPTURE_CONTENT),
            endpoint=_traces_url(env) if enabled else None,
        )


def _traces_url(env: Mapping[str, str]) -> str:
    if env.get(TRACES_ENDPOINT):
        return env[TRACES_ENDPOINT]
    return env[ENDPOINT].rstrip("/") + "/v1/traces"


def _true(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in ("", "false", "0", "no"):
        return False
    if value in ("true", "1", "yes"):
        return True
    raise ConfigurationError(f"{name} must be true or false, not {value!r}")
