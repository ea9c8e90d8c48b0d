"""X-Ray is loaded only when tracing is on, and traces the handler when it is. That a cold start
with tracing off loads neither X-Ray nor OpenTelemetry's SDK, on Lambda and elsewhere, is held by
tests/functional/test_cold_start_collector.py, in the interpreter that counts that cold start.

Each case runs in a fresh interpreter: what a cold start imports is decided at import, and
Powertools' Tracer keeps its configuration process-wide.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from aws_lambda_powertools import Tracer

from toolpipe.shared.errors import ConfigurationError
from toolpipe.shared.tracing import tracing_enabled

ROOT = Path(__file__).resolve().parents[2]
# What every function reads at import (the stack sets these); no credentials: nothing calls AWS.
FUNCTION_ENV = {
    "TABLE_NAME": "t",
    "BUCKET_NAME": "b",
    "STATE_MACHINE_ARN": "arn:aws:states:us-east-1:123456789012:stateMachine:toolpipe",
    "AWS_DEFAULT_REGION": "us-east-1",
    "POWERTOOLS_SERVICE_NAME": "toolpipe",
    "POWERTOOLS_LOG_LEVEL": "ERROR",
    "PATH": os.environ.get("PATH", ""),
}
# As on Lambda, where Powertools turns tracing on by default.
ON_LAMBDA = {"LAMBDA_TASK_ROOT": "/var/task", "AWS_LAMBDA_FUNCTION_NAME": "toolpipe-fn"}


def run_python(code: str, env: dict[str, str]) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_tracing_on_traces_the_handler_through_xray() -> None:
    """On Lambda with tracing on, the handler's subsegment reaches the X-Ray daemon (here a UDP
    socket standing in for it) with Powertools' annotations, in the invocation's trace."""
    daemon = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    daemon.bind(("127.0.0.1", 0))
    daemon.settimeout(30)
    port = daemon.getsockname()[1]
    root = "1-5759e988-bd862e3fe1be46a994272793"
    env = {
        **FUNCTION_ENV,
        **ON_LAMBDA,
        # What Lambda sets for a sampled invocation when the function's tracing is Active.
        "_X_AMZN_TRACE_ID": f"Root={root};Parent=53995c3f42cd8ad8;Sampled=1",
        "AWS_XRAY_DAEMON_ADDRESS": f"127.0.0.1:{port}",
    }
    code = (
        "import json, sys\n"
        "from infra.local.lambdas import LocalContext\n"
        "import functions.triggers.handler as h\n"
        "print(json.dumps([h.lambda_handler({'Event': 's3:TestEvent'}, LocalContext('triggers', 60)),"
        " 'aws_xray_sdk.core' in sys.modules]))"
    )
    with daemon:
        answer, xray_loaded = json.loads(run_python(code, env))
        assert answer == {"outcome": "ignored"} and xray_loaded
        # The daemon protocol: a JSON header line, then the segment document.
        datagrams: list[str] = []
        while not any("## lambda_handler" in d for d in datagrams):
            datagrams.append(daemon.recv(65535).decode())
    segment = json.loads(next(d for d in datagrams if "## lambda_handler" in d).split("\n", 1)[1])
    assert segment["trace_id"] == root
    assert segment["annotations"] == {"ColdStart": True, "Service": "toolpipe"}
    assert "metadata" not in segment  # capture_response=False: no payload reaches the trace


@pytest.mark.parametrize(
    "env",
    [
        {},
        ON_LAMBDA,
        {**ON_LAMBDA, "POWERTOOLS_TRACE_DISABLED": "1"},
        {**ON_LAMBDA, "POWERTOOLS_TRACE_DISABLED": "false"},
        {**ON_LAMBDA, "POWERTOOLS_TRACE_DISABLED": "off"},
        {**ON_LAMBDA, "AWS_SAM_LOCAL": "true"},
        {**ON_LAMBDA, "AWS_CHALICE_CLI_MODE": "true"},
        {"POWERTOOLS_TRACE_DISABLED": "false"},
    ],
)
def test_tracing_is_decided_as_powertools_decides(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Powertools' own rule, read from the same variables: the two must never disagree, or a
    # function would trace without X-Ray loaded (or load it for nothing).
    for name in ("POWERTOOLS_TRACE_DISABLED", "LAMBDA_TASK_ROOT", "AWS_SAM_LOCAL", "AWS_CHALICE_CLI_MODE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert tracing_enabled() is not bool(Tracer._is_tracer_disabled())


def test_a_bad_trace_setting_is_a_one_line_error() -> None:
    with pytest.raises(
        ConfigurationError, match=r"^POWERTOOLS_TRACE_DISABLED must be true or false, not 'maybe'$"
    ):
        tracing_enabled({"POWERTOOLS_TRACE_DISABLED": "maybe", **ON_LAMBDA})


def test_an_endpoint_loads_the_exporter_and_a_bad_protocol_is_one_line_at_import() -> None:
    env = {**FUNCTION_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    code = (
        "import sys, toolpipe.functions.orchestrator.handler as h; h.service(); "
        "print('opentelemetry.exporter.otlp.proto.http' in sys.modules)"
    )
    assert run_python(code, {**env, "OPENAI_API_KEY": "k"}) == "True"
    out = subprocess.run(
        [sys.executable, "-c", "import toolpipe.functions.tool_worker.handler"],
        env={**env, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "toolpipe.shared.errors.ConfigurationError: OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf "
        "(toolpipe's exporter), not 'grpc'"
    )
