package server_test

import (
	"context"
	"log/slog"
	"testing"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/services"
)

// TestBatchLogsAndCountsEachItem: each item of a batch is logged as its
// unary call would be (a failed item at info with its code and error, an
// answered one at debug), beside the batch call's own line, and counted in
// the Claim metrics as a Claim.
func TestBatchLogsAndCountsEachItem(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			t.Parallel()
			var sink syncBuffer
			logger := slog.New(slog.NewJSONHandler(&sink, &slog.HandlerOptions{Level: level}))
			metrics := server.NewMetrics()
			srv := testserver.StartWith(t, testserver.Options{Logger: logger, Config: server.Config{Metrics: metrics}})
			_, err := srv.Client.BatchClaim(context.Background(), &idemv1.BatchClaimRequest{Requests: []*idemv1.ClaimRequest{
				{Namespace: "logs", Key: "a"}, {Namespace: "logs", Key: ""}, {Namespace: "logs", Key: "a"},
			}})
			if err != nil {
				t.Fatal(err)
			}
			var items []map[string]any
			calls := 0
			for _, l := range sink.lines(t) {
				switch l["msg"] {
				case "finished batch item":
					items = append(items, l)
				case "finished call":
					if l["grpc.method"] == "BatchClaim" {
						calls++
					}
				}
			}
			wantItems, wantCalls := 1, 0
			if level == slog.LevelDebug {
				wantItems, wantCalls = 3, 1
			}
			if len(items) != wantItems || calls != wantCalls {
				t.Fatalf("at %s: %d item lines and %d call lines; want %d and %d: %v", level, len(items), calls, wantItems, wantCalls, sink.String())
			}
			for _, l := range items {
				failed := l["batch.item"] == float64(1)
				switch {
				case l["grpc.method"] != "BatchClaim" || l["grpc.service"] != "idem.v1.IdempotencyService" || l["tenant"] != services.DefaultTenant:
					t.Errorf("item line %v", l)
				case failed && (l["level"] != "INFO" || l["grpc.code"] != "InvalidArgument" || l["grpc.error"] == nil):
					t.Errorf("the failed item's line %v; want INFO with its code and error", l)
				case !failed && (l["level"] != "DEBUG" || l["grpc.code"] != "OK"):
					t.Errorf("an answered item's line %v; want DEBUG, OK", l)
				}
			}

			counted := map[string]float64{}
			families, err := metrics.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range families {
				if f.GetName() != "idem_claims_total" {
					continue
				}
				for _, m := range f.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "outcome" {
							counted[l.GetValue()] += m.GetCounter().GetValue()
						}
					}
				}
			}
			if counted["acquired"] != 1 || counted["in_progress"] != 1 || len(counted) != 2 {
				t.Fatalf("idem_claims_total by outcome: %v; want one acquired and one in_progress", counted)
			}
		})
	}
}
