"""Which exporters OpenTelemetry's standard variables ask the commands for."""

from __future__ import annotations

import pytest

from runner.tracing.environment import traces_from_environment, wanted_exporters


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, []),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ["otlp", "console"]),
        ({"OTEL_TRACES_EXPORTER": "none"}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, []),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, []),
    ],
)
def test_the_exporters_the_environment_asks_for(environ: dict[str, str], wanted: list[str]) -> None:
    assert wanted_exporters(environ) == wanted


def test_an_exporter_runner_does_not_know_is_refused() -> None:
    with pytest.raises(ValueError, match="OTEL_TRACES_EXPORTER names zipkin: runner knows"):
        wanted_exporters({"OTEL_TRACES_EXPORTER": "zipkin"})


def test_an_otlp_protocol_runner_does_not_speak_is_refused() -> None:
    environ = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
    refused = pytest.raises(ValueError, match="'http/json': runner exports traces over")
    with refused, traces_from_environment(environ):
        pass
