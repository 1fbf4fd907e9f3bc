"""Traces configured by OpenTelemetry's standard environment variables, for the commands
(`runner run`, `resume`, `worker`) that have no Python caller to pass a tracer provider.

`OTEL_TRACES_EXPORTER` names the exporters (`otlp`, `console`, `none`; comma-separated);
unset, an `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) means `otlp`, and nothing
set means no traces (and OpenTelemetry is never imported). OTLP speaks
`OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf` (the default) or `grpc`; the exporters read
their own variables (endpoint, headers, timeout), the provider `OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES` and `OTEL_TRACES_SAMPLER`, the batch `OTEL_BSP_*`.
`OTEL_SDK_DISABLED=true` turns it all off. A provider set globally already (as
`opentelemetry-instrument` sets one) is left as it is.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from runner.errors import MissingExtra

SERVICE = "runner"
_EXPORTERS = ("otlp", "console", "none")
_PROTOCOLS = ("http/protobuf", "grpc")


def wanted_exporters(environ: Mapping[str, str]) -> list[str]:
    """The exporters the environment asks for (none: no traces)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = environ.get("OTEL_TRACES_EXPORTER")
    if named is None:
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        return ["otlp"] if endpoint else []
    names = [name.strip().lower() for name in named.split(",") if name.strip()]
    unknown = [name for name in names if name not in _EXPORTERS]
    if unknown:
        raise ValueError(
            f"OTEL_TRACES_EXPORTER names {', '.join(unknown)}: runner knows {', '.join(_EXPORTERS)}"
        )
    return [name for name in names if name != "none"]


@contextmanager
def traces_from_environment(environ: Mapping[str, str] | None = None) -> Iterator[None]:
    """Set a global tracer provider for the command's runs if the environment asks for one;
    on the way out, shut it down so every span is exported before the process ends."""
    env = os.environ if environ is None else environ
    names = wanted_exporters(env)
    if not names:
        yield
        return
    provider = _provider(names, env)
    if provider is None:
        yield
        return
    try:
        yield
    finally:
        provider.shutdown()


def _provider(names: list[str], environ: Mapping[str, str]) -> Any:
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ModuleNotFoundError as exc:
        raise MissingExtra(
            f"OTEL_* variables ask for traces, but {exc.name} is not installed: "
            "pip install 'durable-runner[otel]'"
        ) from None
    from runner.tracing.otel import enabled

    exporters = [_exporter(name, environ) for name in names]  # a bad protocol is said first
    if enabled():
        return None  # configured already (opentelemetry-instrument, sitecustomize)
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE}))
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


def _exporter(name: str, environ: Mapping[str, str]) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        # stderr: stdout is where `runner run` prints the answer.
        return ConsoleSpanExporter(out=sys.stderr)
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol not in _PROTOCOLS:
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL is {protocol!r}: runner exports traces over "
            f"{' or '.join(_PROTOCOLS)}"
        )
    package = f"opentelemetry-exporter-otlp-proto-{'grpc' if protocol == 'grpc' else 'http'}"
    module = f"opentelemetry.exporter.otlp.proto.{protocol.split('/')[0]}.trace_exporter"
    try:
        exporters = importlib.import_module(module)
    except ModuleNotFoundError:
        extra = "'durable-runner[otel]'" if protocol != "grpc" else package
        raise MissingExtra(f"OTLP over {protocol} needs {package}: pip install {extra}") from None
    return exporters.OTLPSpanExporter()
