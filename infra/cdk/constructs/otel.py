"""Where the pipeline's functions send each run's trace (shared/telemetry): an OTLP/HTTP
endpoint, or an OpenTelemetry collector Lambda layer (ADOT's, which exports to X-Ray, or the
OpenTelemetry community's) listening beside each function. Never the tool runner: tool code
gets no setting of the pipeline's."""

import re
from dataclasses import dataclass

from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from toolpipe.shared.telemetry.settings import CAPTURE_CONTENT, ENDPOINT

# Where a collector layer's OTLP/HTTP receiver listens, in its default configuration.
COLLECTOR_ENDPOINT = "http://localhost:4318"
_LAYER_ARN = re.compile(r"^arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:layer:[A-Za-z0-9_-]+:\d+$")
_URL = re.compile(r"^https?://[^\s/?#]+(/[^\s?#]*)?$")


@dataclass(frozen=True)
class OtelExport:
    """`endpoint`: an OTLP/HTTP base URL (`/v1/traces` is added); with `collector_layer_arn`
    and no endpoint, the layer's own receiver. `collector_layer_arn`: a collector layer in the
    stack's region, added to every pipeline function (ADOT's default configuration exports to
    X-Ray with the function's role: keep `tracing=True`, which grants it). `capture_content`:
    prompts, replies and results in spans too (OpenTelemetry's GenAI content-capture setting),
    cut at 4,096 characters; off by default."""

    endpoint: str | None = None
    collector_layer_arn: str | None = None
    service_name: str = "toolpipe"
    capture_content: bool = False

    def __post_init__(self) -> None:
        if self.endpoint is None and self.collector_layer_arn is None:
            raise ValueError("otel: give an endpoint, a collector_layer_arn, or both")
        if self.endpoint is not None and not _URL.match(self.endpoint):
            raise ValueError(f"otel.endpoint must be an http(s) URL, not {self.endpoint!r}")
        if self.collector_layer_arn is not None and not _LAYER_ARN.match(self.collector_layer_arn):
            raise ValueError(
                f"otel.collector_layer_arn must be a layer version ARN, not {self.collector_layer_arn!r}"
            )
        if not re.fullmatch(r"[A-Za-z0-9_.:/-]{1,128}", self.service_name):
            raise ValueError(
                f"otel.service_name: 1 to 128 of A-Z a-z 0-9 _ . : / -, not {self.service_name!r}"
            )

    def environment(self) -> dict[str, str]:
        """What the functions that trace read (the standard OpenTelemetry variables)."""
        return {
            ENDPOINT: self.endpoint or COLLECTOR_ENDPOINT,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": self.service_name,
            **({CAPTURE_CONTENT: "true"} if self.capture_content else {}),
        }

    def layers(self, scope: Construct) -> list[lambda_.ILayerVersion]:
        if self.collector_layer_arn is None:
            return []
        return [lambda_.LayerVersion.from_layer_version_arn(scope, "OtelCollector", self.collector_layer_arn)]


def otel_environment(otel: OtelExport | None) -> dict[str, str]:
    return {} if otel is None else otel.environment()


def telemetry_layers(scope: Construct, otel: OtelExport | None, tracing: bool) -> list[lambda_.ILayerVersion]:
    """The collector layer the pipeline's functions carry, if `otel` names one."""
    if otel is None:
        return []
    if otel.endpoint is None and not tracing:
        raise ValueError(
            "otel: a collector layer exports to X-Ray with the function's role: keep tracing=True, or give an endpoint"
        )
    return otel.layers(scope)


def is_otel_setting(name: str) -> bool:
    return name.startswith("OTEL_")
