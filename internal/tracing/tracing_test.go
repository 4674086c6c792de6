package tracing

import (
	"context"
	"strings"
	"testing"
)

func TestEnabled(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		env     map[string]string
		want    bool
		wantErr string
	}{
		{"nothing set", nil, false, ""},
		{"a service name alone", map[string]string{"OTEL_SERVICE_NAME": "idemd"}, false, ""},
		{"a sampler alone", map[string]string{"OTEL_TRACES_SAMPLER": "always_on"}, false, ""},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true, ""},
		{"a traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true, ""},
		{"the otlp exporter alone", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"exporter none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false, ""},
		{"SDK disabled wins", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, ""},
		{"SDK disabled false", map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true, ""},
		{"http/protobuf", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, true, ""},
		{"grpc protocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, "OTEL_EXPORTER_OTLP_PROTOCOL is \"grpc\""},
		{"traces protocol wins", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, true, ""},
		{"protocol ignored while off", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, ""},
		{"an exporter idemd lacks", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTEL_TRACES_EXPORTER is \"zipkin\""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Enabled(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Enabled: %v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Enabled = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestFromEnvOff: with tracing off there is no provider at all.
func TestFromEnvOff(t *testing.T) {
	t.Parallel()
	tp, err := FromEnv(context.Background(), func(string) string { return "" }, "test")
	if tp != nil || err != nil {
		t.Fatalf("FromEnv with no OTEL_ variables = %v, %v; want nil, nil", tp, err)
	}
}
