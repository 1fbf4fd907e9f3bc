"""Traces: OpenTelemetry spans of runs, named by the GenAI semantic conventions.

`run_spans` chooses which spans a run gets (none unless OpenTelemetry is installed and a
tracer provider is configured); `otel` makes them; `environment` configures a tracer
provider from OpenTelemetry's standard variables for the commands. The loop never imports
this package: the run's driver hands it a `Spans` (the protocol in `runner.core.spans`).

It may import: `runner.core` and the shared leaves.
"""
