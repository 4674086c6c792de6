// Package tracing sets up idemd's OpenTelemetry tracing from the standard
// OTEL_* environment variables: an OTLP/HTTP exporter and a batching span
// processor. When no variable asks for traces it sets up nothing, so that a
// server without tracing pays nothing for it on the request path.
package tracing

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Enabled reports whether the environment (read through getenv) asks for
// traces: OTEL_TRACES_EXPORTER=otlp, or an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) with
// OTEL_TRACES_EXPORTER unset. OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn tracing off whatever else is set. An
// exporter idemd does not have (zipkin, console, …), or an OTLP protocol
// other than http/protobuf, is an error rather than silently no traces.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	on := false
	switch exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exporter {
	case "none":
		return false, nil
	case "otlp":
		on = true
	case "":
		on = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER is %q; idemd exports traces with otlp (over HTTP), or none", exporter)
	}
	if !on {
		return false, nil
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(name)); p != "" {
			if p != "http/protobuf" {
				return false, fmt.Errorf("%s is %q; idemd exports traces over OTLP/HTTP: set it to http/protobuf (or unset it) and point the endpoint at the collector's HTTP port (4318 by default)", name, p)
			}
			break // the traces-specific variable wins
		}
	}
	return true, nil
}

// FromEnv returns a tracer provider configured by the environment, or nil
// when Enabled says tracing is off (getenv is what Enabled reads; idemd
// passes os.Getenv, which the SDK reads for the rest). The exporter reads the
// OTEL_EXPORTER_OTLP_* variables (endpoint, headers, timeout, compression,
// certificates), the provider OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
// (parentbased_always_on by default: a caller's sampling decision is
// followed) and the OTEL_BSP_* batching variables. The resource is
// service.name=idemd and service.version=version, which OTEL_SERVICE_NAME
// and OTEL_RESOURCE_ATTRIBUTES override. Its Shutdown flushes the spans not
// yet sent.
func FromEnv(ctx context.Context, getenv func(string) string, version string) (*sdktrace.TracerProvider, error) {
	on, err := Enabled(getenv)
	if err != nil || !on {
		return nil, err
	}
	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "idemd"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // last, so that the operator's attributes win
	)
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)), nil
}
