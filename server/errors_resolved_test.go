package server_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
)

// notStoredByOperator is what the answer to a holder's call that an
// operator's resolution overrode says.
const notStoredByOperator = "your result was not stored: the record was resolved by an operator"

// callAnswer is the answer to a token call over one transport: failure is
// "" when the call succeeded, and otherwise what it was answered; check
// checks a refusal's code (its Connect name), reason and the text its
// message must contain.
type callAnswer struct {
	failure string
	check   func(t *testing.T, code, reason, text string)
}

// tokenCallOver sends a Complete or Fail over one transport: gRPC, or one
// of the JSON protocols.
type tokenCallOver func(t *testing.T, method string, msg map[string]any) callAnswer

// transports are the three ways to send a token call to ts.
func transports(ts *testserver.Server) map[string]tokenCallOver {
	out := map[string]tokenCallOver{
		"grpc": func(t *testing.T, method string, msg map[string]any) callAnswer {
			t.Helper()
			ctx := testContext(t)
			token, _ := strconv.ParseInt(msg["token"].(string), 10, 64)
			var err error
			switch method {
			case "Complete":
				result, _ := base64.StdEncoding.DecodeString(msg["result"].(string))
				_, err = ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: msg["namespace"].(string), Key: msg["key"].(string), Token: token, Result: result})
			case "Fail":
				_, err = ts.Client.Fail(ctx, &idemv1.FailRequest{Namespace: msg["namespace"].(string), Key: msg["key"].(string), Token: token,
					Error: msg["error"].(string), Retryable: msg["retryable"].(bool)})
			}
			if err == nil {
				return callAnswer{}
			}
			return callAnswer{failure: err.Error(), check: func(t *testing.T, code, reason, text string) {
				t.Helper()
				grpcCode := map[string]codes.Code{"failed_precondition": codes.FailedPrecondition}[code]
				if st := requireStatus(t, err, grpcCode, reason); !strings.Contains(st.Message(), text) {
					t.Fatalf("message %q does not say %q", st.Message(), text)
				}
			}}
		},
	}
	for _, p := range protocols {
		out[p.name] = func(t *testing.T, method string, msg map[string]any) callAnswer {
			t.Helper()
			a := p.call(t, ts.JSONURL, method, msg, "")
			if a.status == http.StatusOK {
				return callAnswer{}
			}
			return callAnswer{failure: fmt.Sprintf("HTTP %d %s", a.status, a.raw), check: func(t *testing.T, code, reason, text string) {
				t.Helper()
				checkJSONError(t, a, p.name == "rest", code, reason)
				if msg, _ := a.body["message"].(string); !strings.Contains(msg, text) {
					t.Fatalf("message %q does not say %q", msg, text)
				}
			}}
		}
	}
	return out
}

// TestLateCallAfterOperatorResolution: after an operator resolved a held
// record whose lease ran out, the holder's late Complete or Fail with
// another value than the resolution stored is refused with
// FAILED_PRECONDITION / RESOLVED_BY_OPERATOR, saying its result was not
// stored, and the record keeps the operator's value; the same call with
// the operator's value gets the record, as a retry does. A Complete or
// Fail with another value on a record the holder itself finished is
// ALREADY_TERMINAL. Over gRPC, Connect and REST, on both stores.
func TestLateCallAfterOperatorResolution(t *testing.T) {
	t.Parallel()
	onBothStores(t, func(t *testing.T, st store.Store) {
		ts := testserver.StartWith(t, testserver.Options{JSON: true, Config: server.Config{Policies: holdPolicies},
			DBOptions: []testdb.Option{testdb.MaxConns(1)}, Store: func(*postgres.Store) store.Store { return st }})
		ctx := testContext(t)
		b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

		cases := []struct {
			kind string
			// resolve is the operator's resolution; nil for a record the
			// holder finishes itself with own.
			resolve       *idemv1.ResolveRecordRequest
			own           map[string]any
			same, another map[string]any
			reason, text  string
		}{
			{kind: "completed-by-operator",
				resolve: &idemv1.ResolveRecordRequest{Resolution: &idemv1.ResolveRecordRequest_Completed{Completed: &idemv1.ResolveCompleted{Result: []byte("A")}}},
				same:    map[string]any{"method": "Complete", "result": b64("A")},
				another: map[string]any{"method": "Complete", "result": b64("B")},
				reason:  "RESOLVED_BY_OPERATOR", text: notStoredByOperator},
			{kind: "failed-by-operator",
				resolve: &idemv1.ResolveRecordRequest{Resolution: &idemv1.ResolveRecordRequest_Failed{Failed: &idemv1.ResolveFailed{Error: "refunded by hand"}}},
				same:    map[string]any{"method": "Fail", "error": "refunded by hand", "retryable": false},
				another: map[string]any{"method": "Fail", "error": "card declined", "retryable": false},
				reason:  "RESOLVED_BY_OPERATOR", text: notStoredByOperator},
			{kind: "completed-by-holder",
				own:     map[string]any{"method": "Complete", "result": b64("A")},
				same:    map[string]any{"method": "Complete", "result": b64("A")},
				another: map[string]any{"method": "Complete", "result": b64("B")},
				reason:  "ALREADY_TERMINAL", text: "same value"},
			{kind: "failed-by-holder",
				own:     map[string]any{"method": "Fail", "error": "card declined", "retryable": false},
				same:    map[string]any{"method": "Fail", "error": "card declined", "retryable": false},
				another: map[string]any{"method": "Fail", "error": "card declined", "retryable": true},
				reason:  "ALREADY_TERMINAL", text: "same value"},
		}

		// Every record's lease runs out at once, the shortest lease after
		// the last one's Claim.
		sends := transports(ts)
		held := map[string]*idemv1.Record{}
		var lapsed time.Time
		for name := range sends {
			for _, c := range cases {
				key := c.kind + "-" + name
				rec := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Namespace: "hold.pay", Key: key, LeaseTtl: dur(limits.MinLeaseTTL)})
				held[key] = rec
				lapsed = rec.GetLeaseExpiresAt().AsTime()
			}
		}
		time.Sleep(time.Until(lapsed) + 50*time.Millisecond)

		for name, send := range sends {
			for _, c := range cases {
				key := c.kind + "-" + name
				t.Run(name+"/"+c.kind, func(t *testing.T) {
					call := func(value map[string]any) callAnswer {
						t.Helper()
						m := map[string]any{"namespace": "hold.pay", "key": key, "token": strconv.FormatInt(held[key].GetToken(), 10)}
						for k, v := range value {
							if k != "method" {
								m[k] = v
							}
						}
						return send(t, value["method"].(string), m)
					}
					if c.resolve != nil {
						resp, err := ts.Client.Claim(ctx, &idemv1.ClaimRequest{Namespace: "hold.pay", Key: key})
						if err != nil || resp.GetOutcome() != idemv1.Outcome_OUTCOME_UNRESOLVED {
							t.Fatalf("Claim of the lapsed held lease: %v, %v; want UNRESOLVED", resp.GetOutcome(), err)
						}
						r := proto.Clone(c.resolve).(*idemv1.ResolveRecordRequest)
						r.Namespace, r.Key = "hold.pay", key
						if _, err := ts.Admin.ResolveRecord(ctx, r); err != nil {
							t.Fatalf("ResolveRecord: %v", err)
						}
					} else if a := call(c.own); a.failure != "" {
						t.Fatalf("the holder's late %s: %s; want it stored", c.own["method"], a.failure)
					}
					stored := mustLookupIn(t, ts.Client, "hold.pay", key)

					a := call(c.another)
					if a.failure == "" {
						t.Fatalf("the holder's %s with another value than the record's succeeded", c.another["method"])
					}
					a.check(t, "failed_precondition", c.reason, c.text)
					if now := mustLookupIn(t, ts.Client, "hold.pay", key); !proto.Equal(now, stored) {
						t.Fatalf("after the refused call: %v; want the record as it was: %v", now, stored)
					}
					for range 2 {
						if a := call(c.same); a.failure != "" {
							t.Fatalf("the holder's %s with the record's own value: %s; want the record", c.same["method"], a.failure)
						}
					}
				})
			}
		}
	})
}
