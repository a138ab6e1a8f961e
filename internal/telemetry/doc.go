// Package telemetry sets up logging and OpenTelemetry for a Plexus process.
//
// OpenTelemetry is configured only through the standard OTEL_* environment
// variables, so operators use what they already know:
//
//	OTEL_TRACES_EXPORTER=otlp|console|none   which exporter (autoexport)
//	OTEL_EXPORTER_OTLP_ENDPOINT              where OTLP goes
//	OTEL_EXPORTER_OTLP_PROTOCOL              grpc or http/protobuf (default)
//	OTEL_TRACES_SAMPLER[_ARG]                sampling
//	OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES   resource
//	OTEL_METRICS_EXPORTER                    OpenTelemetry metrics (Prometheus
//	                                         /metrics is always on regardless)
//	OTEL_SDK_DISABLED=true                   everything off
//
// Unlike the OpenTelemetry default, a process with no exporter variable and
// no OTLP endpoint set exports nothing instead of retrying a collector on
// localhost forever. Trace ids are still created and propagated, so logs
// carry them and a downstream process that does export sees one trace.
//
// Propagation is W3C trace context plus baggage, installed globally.
package telemetry
