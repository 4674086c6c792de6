package server_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
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

// TestOneLogLinePerRPC: every call logs one line; health probes and the
// workers' answered calls at debug, a worker's call that ends in an error
// code and every admin call at info.
func TestOneLogLinePerRPC(t *testing.T) {
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
			claimed, err := srv.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: "logs", Key: "k"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = srv.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: "logs", Key: "k", Token: claimed.GetRecord().GetToken() + 1})
			if status.Code(err) != codes.Aborted {
				t.Fatalf("Complete with a wrong token: %v, want Aborted (lease lost)", err)
			}
			if _, err := srv.Admin.ListRecords(ctx, &idemv1.ListRecordsRequest{Namespace: "logs"}); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"Check": "DEBUG", "Claim": "DEBUG", "Complete": "INFO", "ListRecords": "INFO"}
			got := map[string]int{}
			for _, l := range sink.lines(t) {
				if l["msg"] != "finished call" {
					continue
				}
				method, _ := l["grpc.method"].(string)
				got[method]++
				if l["level"] != want[method] {
					t.Errorf("%s logged at %v, want %s: %v", method, l["level"], want[method], l)
				}
				if _, ok := l["grpc.time_ms"].(float64); !ok {
					t.Errorf("%s's line has no duration: %v", method, l)
				}
			}
			for method, lvl := range want {
				n := 0
				if lvl == "INFO" || level == slog.LevelDebug {
					n = 1
				}
				if got[method] != n {
					t.Errorf("at %s: %d %s lines, want %d", level, got[method], method, n)
				}
			}
			if l := sink.lines(t); level == slog.LevelDebug {
				for _, m := range l {
					if m["grpc.method"] == "Claim" && (m["grpc.code"] != "OK" || m["grpc.service"] != "idem.v1.IdempotencyService") {
						t.Errorf("Claim's line: %v", m)
					}
				}
			}
		})
	}
}
