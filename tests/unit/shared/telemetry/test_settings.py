"""Tracing is configured the standard OpenTelemetry way, and off unless an endpoint is set."""

import pytest

from toolpipe.shared.errors import ConfigurationError
from toolpipe.shared.telemetry import TracingSettings

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}


@pytest.mark.parametrize(
    ("env", "enabled"),
    [
        ({}, False),
        (ENDPOINT, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ""}, False),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False),
        ({**ENDPOINT, "OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, True),
        # Settings for a protocol nobody uses here are not read when nothing is exported.
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, False),
    ],
)
def test_on_only_with_an_endpoint(env: dict[str, str], enabled: bool) -> None:
    assert TracingSettings.from_env(env).enabled is enabled


def test_content_is_captured_only_when_asked() -> None:
    assert not TracingSettings.from_env(ENDPOINT).capture_content
    on = {**ENDPOINT, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    assert TracingSettings.from_env(on).capture_content
    assert not TracingSettings.from_env(
        {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    ).capture_content


@pytest.mark.parametrize(
    ("env", "error"),
    [
        (
            {**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf (toolpipe's exporter), not 'grpc'",
        ),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "maybe"}, "OTEL_SDK_DISABLED must be true or false, not 'maybe'"),
        (
            {**ENDPOINT, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "all"},
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT must be true or false, not 'all'",
        ),
    ],
)
def test_a_bad_value_is_one_line(env: dict[str, str], error: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        TracingSettings.from_env(env)
    assert str(raised.value) == error


def test_spans_go_to_the_traces_endpoint_or_the_base_endpoints_v1_traces() -> None:
    assert TracingSettings.from_env(ENDPOINT).endpoint == "http://collector:4318/v1/traces"
    assert (
        TracingSettings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}).endpoint
        == "http://c:4318/v1/traces"
    )
    own = {**ENDPOINT, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces.example/in"}
    assert TracingSettings.from_env(own).endpoint == "https://traces.example/in"
