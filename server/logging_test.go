package server_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testserver"
)

// lines parses the JSON log lines written so far (syncBuffer is in
// tenancy_test.go).
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		m := map[string]any{}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestOneLogLinePerRPCAndHealthOnlyAtDebug(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			t.Parallel()
			var sink syncBuffer
			logger := slog.New(slog.NewJSONHandler(&sink, &slog.HandlerOptions{Level: level}))
			srv := testserver.StartWith(t, testserver.Options{Logger: logger})
			ctx := context.Background()
			if _, err := healthpb.NewHealthClient(srv.Conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: "logs", Key: "k"}); err != nil {
				t.Fatal(err)
			}
			var claims, health int
			for _, l := range sink.lines(t) {
				if l["msg"] != "finished call" {
					continue
				}
				switch l["grpc.method"] {
				case "Claim":
					claims++
					if l["grpc.code"] != "OK" || l["grpc.service"] != "idem.v1.IdempotencyService" || l["level"] != "INFO" {
						t.Errorf("Claim's line: %v", l)
					}
					if _, ok := l["grpc.time_ms"].(float64); !ok {
						t.Errorf("Claim's line has no duration: %v", l)
					}
				case "Check":
					health++
					if l["level"] != "DEBUG" {
						t.Errorf("health check logged at %v, want DEBUG", l["level"])
					}
				}
			}
			wantHealth := 0
			if level == slog.LevelDebug {
				wantHealth = 1
			}
			if claims != 1 || health != wantHealth {
				t.Fatalf("at %s: %d Claim lines and %d health lines, want 1 and %d", level, claims, health, wantHealth)
			}
		})
	}
}
