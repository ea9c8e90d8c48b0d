"""`-c otel_endpoint=...` / `-c otel_collector_layer_arn=...`: where each run's trace goes.

Every pipeline function gets the standard OpenTelemetry variables (and the collector layer),
never the tool runner, whose code is the user's tools; unset, no function traces.
"""

from pathlib import Path
from typing import Any

import pytest

from tests.infra.test_tracing_setting import _functions, _lambda_env, _synth
from toolpipe.cdk import OtelExport
from toolpipe.shared.telemetry import TracingSettings

LAYER = "arn:aws:lambda:us-east-1:901920570463:layer:aws-otel-collector-arm64-ver-0-117-0:1"


def _runner(functions: dict[str, Any]) -> str:
    [name] = [n for n, p in functions.items() if p["Handler"].endswith("tool_runner.handler.lambda_handler")]
    return name


def test_by_default_no_function_traces(template: Any) -> None:
    for props in _functions(template).values():
        env = _lambda_env(props)
        assert not [name for name in env if name.startswith("OTEL_")]
        assert not TracingSettings.from_env(env).enabled


@pytest.mark.slow
def test_a_collector_layer_reaches_every_pipeline_function_but_the_tool_runner(tmp_path: Path) -> None:
    functions = _functions(
        _synth({"otel_collector_layer_arn": LAYER, "otel_capture_content": "true"}, tmp_path)
    )
    runner = functions.pop(_runner(functions))
    assert len(functions) == 4  # orchestrator, tool worker, API, triggers
    for props in functions.values():
        settings = TracingSettings.from_env(_lambda_env(props))
        assert settings == TracingSettings(
            enabled=True, capture_content=True, endpoint="http://localhost:4318/v1/traces"
        )
        assert LAYER in props["Layers"]
        assert props["Environment"]["Variables"]["OTEL_SERVICE_NAME"] == "toolpipe"
    assert LAYER not in runner["Layers"]
    assert not [name for name in runner["Environment"]["Variables"] if name.startswith("OTEL_")]


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({}, "otel: give an endpoint, a collector_layer_arn, or both"),
        ({"endpoint": "collector:4318"}, "otel.endpoint must be an http(s) URL, not 'collector:4318'"),
        (
            {"collector_layer_arn": "aws-otel"},
            "otel.collector_layer_arn must be a layer version ARN, not 'aws-otel'",
        ),
        (
            {"endpoint": "http://c:4318", "service_name": "a b"},
            "otel.service_name: 1 to 128 of A-Z a-z 0-9 _ . : / -, not 'a b'",
        ),
    ],
)
def test_a_bad_setting_is_a_one_line_error(fields: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError) as raised:
        OtelExport(**fields)
    assert str(raised.value) == error


def test_a_collector_layer_without_lambda_tracing_is_refused() -> None:
    from aws_cdk import App, Stack

    from toolpipe.infra.cdk.constructs.otel import telemetry_layers

    with pytest.raises(ValueError) as raised:
        telemetry_layers(Stack(App()), OtelExport(collector_layer_arn=LAYER), tracing=False)
    assert str(raised.value) == (
        "otel: a collector layer exports to X-Ray with the function's role: keep tracing=True, or give an endpoint"
    )
    assert telemetry_layers(Stack(App()), OtelExport(endpoint="http://c:4318"), tracing=False) == []
