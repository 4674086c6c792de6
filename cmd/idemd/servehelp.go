package main

// Help is the part of `idemd serve --help` that no flag carries: tracing is
// configured by the standard OTEL_* variables, not by flags.
func (serveCmd) Help() string {
	return `Every flag has an IDEM_* twin in the environment; a flag given on the command line wins over its variable.

Tracing (OpenTelemetry) is off unless OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_TRACES_EXPORTER=otlp asks for it. idemd exports over OTLP/HTTP only (http/protobuf): point the endpoint at the collector's HTTP port (4318 by default, e.g. http://otel-collector:4318); OTEL_EXPORTER_OTLP_PROTOCOL=grpc is refused at start-up.`
}
