package server_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/server/services"
)

// idemAPI is IdempotencyService and AdminService as the server implements
// them, so that one case runs through a gRPC client and on the services
// directly.
type idemAPI interface {
	Claim(context.Context, *idemv1.ClaimRequest) (*idemv1.ClaimResponse, error)
	Complete(context.Context, *idemv1.CompleteRequest) (*idemv1.CompleteResponse, error)
	Fail(context.Context, *idemv1.FailRequest) (*idemv1.FailResponse, error)
	Heartbeat(context.Context, *idemv1.HeartbeatRequest) (*idemv1.HeartbeatResponse, error)
	Lookup(context.Context, *idemv1.LookupRequest) (*idemv1.LookupResponse, error)
	BatchClaim(context.Context, *idemv1.BatchClaimRequest) (*idemv1.BatchClaimResponse, error)
	BatchComplete(context.Context, *idemv1.BatchCompleteRequest) (*idemv1.BatchCompleteResponse, error)
	BatchFail(context.Context, *idemv1.BatchFailRequest) (*idemv1.BatchFailResponse, error)
	BatchHeartbeat(context.Context, *idemv1.BatchHeartbeatRequest) (*idemv1.BatchHeartbeatResponse, error)
	BatchLookup(context.Context, *idemv1.BatchLookupRequest) (*idemv1.BatchLookupResponse, error)
	ListRecords(context.Context, *idemv1.ListRecordsRequest) (*idemv1.ListRecordsResponse, error)
	DeleteRecord(context.Context, *idemv1.DeleteRecordRequest) (*idemv1.DeleteRecordResponse, error)
	Stats(context.Context, *idemv1.StatsRequest) (*idemv1.StatsResponse, error)
}

// viaGRPC sends every call over gRPC. The generated client refuses to encode
// a string that is not UTF-8, so it carries NULs only.
type viaGRPC struct {
	c     idemv1.IdempotencyServiceClient
	admin idemv1.AdminServiceClient
}

func (v viaGRPC) Claim(ctx context.Context, r *idemv1.ClaimRequest) (*idemv1.ClaimResponse, error) {
	return v.c.Claim(ctx, r)
}
func (v viaGRPC) Complete(ctx context.Context, r *idemv1.CompleteRequest) (*idemv1.CompleteResponse, error) {
	return v.c.Complete(ctx, r)
}
func (v viaGRPC) Fail(ctx context.Context, r *idemv1.FailRequest) (*idemv1.FailResponse, error) {
	return v.c.Fail(ctx, r)
}
func (v viaGRPC) Heartbeat(ctx context.Context, r *idemv1.HeartbeatRequest) (*idemv1.HeartbeatResponse, error) {
	return v.c.Heartbeat(ctx, r)
}
func (v viaGRPC) Lookup(ctx context.Context, r *idemv1.LookupRequest) (*idemv1.LookupResponse, error) {
	return v.c.Lookup(ctx, r)
}
func (v viaGRPC) BatchClaim(ctx context.Context, r *idemv1.BatchClaimRequest) (*idemv1.BatchClaimResponse, error) {
	return v.c.BatchClaim(ctx, r)
}
func (v viaGRPC) BatchComplete(ctx context.Context, r *idemv1.BatchCompleteRequest) (*idemv1.BatchCompleteResponse, error) {
	return v.c.BatchComplete(ctx, r)
}
func (v viaGRPC) BatchFail(ctx context.Context, r *idemv1.BatchFailRequest) (*idemv1.BatchFailResponse, error) {
	return v.c.BatchFail(ctx, r)
}
func (v viaGRPC) BatchHeartbeat(ctx context.Context, r *idemv1.BatchHeartbeatRequest) (*idemv1.BatchHeartbeatResponse, error) {
	return v.c.BatchHeartbeat(ctx, r)
}
func (v viaGRPC) BatchLookup(ctx context.Context, r *idemv1.BatchLookupRequest) (*idemv1.BatchLookupResponse, error) {
	return v.c.BatchLookup(ctx, r)
}
func (v viaGRPC) ListRecords(ctx context.Context, r *idemv1.ListRecordsRequest) (*idemv1.ListRecordsResponse, error) {
	return v.admin.ListRecords(ctx, r)
}
func (v viaGRPC) DeleteRecord(ctx context.Context, r *idemv1.DeleteRecordRequest) (*idemv1.DeleteRecordResponse, error) {
	return v.admin.DeleteRecord(ctx, r)
}
func (v viaGRPC) Stats(ctx context.Context, r *idemv1.StatsRequest) (*idemv1.StatsResponse, error) {
	return v.admin.Stats(ctx, r)
}

// direct calls the services in the process, as an in-process transport
// would: it carries what protobuf's decoding refuses, bytes that are not
// UTF-8.
type direct struct {
	*services.Service
	*services.AdminService
}

// textCase is one text field of one call: the reason it is refused with,
// and the call with bad in that field.
type textCase struct {
	name, field, reason string
	call                func(ctx context.Context, api idemAPI, bad string) error
}

// textCases returns every text field of every RPC, on the records held
// (PROCESSING under a live lease) and done (COMPLETED).
func textCases(held, done *idemv1.Record) []textCase {
	type idCall func(ctx context.Context, api idemAPI, namespace, key string) error
	idCalls := []struct {
		rpc  string
		call idCall
	}{
		{"Claim", func(ctx context.Context, api idemAPI, namespace, key string) error {
			_, err := api.Claim(ctx, &idemv1.ClaimRequest{Namespace: namespace, Key: key})
			return err
		}},
		{"Complete", func(ctx context.Context, api idemAPI, namespace, key string) error {
			_, err := api.Complete(ctx, &idemv1.CompleteRequest{Namespace: namespace, Key: key, Token: held.GetToken()})
			return err
		}},
		{"Fail", func(ctx context.Context, api idemAPI, namespace, key string) error {
			_, err := api.Fail(ctx, &idemv1.FailRequest{Namespace: namespace, Key: key, Token: held.GetToken()})
			return err
		}},
		{"Heartbeat", func(ctx context.Context, api idemAPI, namespace, key string) error {
			_, err := api.Heartbeat(ctx, &idemv1.HeartbeatRequest{Namespace: namespace, Key: key, Token: held.GetToken()})
			return err
		}},
		{"Lookup", func(ctx context.Context, api idemAPI, namespace, key string) error {
			_, err := api.Lookup(ctx, &idemv1.LookupRequest{Namespace: namespace, Key: key})
			return err
		}},
		// The batch calls, of one item: its error (sameItemErrors).
		{"BatchClaim", func(ctx context.Context, api idemAPI, namespace, key string) error {
			resp, err := api.BatchClaim(ctx, &idemv1.BatchClaimRequest{Requests: []*idemv1.ClaimRequest{{Namespace: namespace, Key: key}}})
			return sameItemErrors(resp.GetResults(), err)
		}},
		{"BatchComplete", func(ctx context.Context, api idemAPI, namespace, key string) error {
			resp, err := api.BatchComplete(ctx, &idemv1.BatchCompleteRequest{Requests: []*idemv1.CompleteRequest{{Namespace: namespace, Key: key, Token: held.GetToken()}}})
			return sameItemErrors(resp.GetResults(), err)
		}},
		{"BatchFail", func(ctx context.Context, api idemAPI, namespace, key string) error {
			resp, err := api.BatchFail(ctx, &idemv1.BatchFailRequest{Requests: []*idemv1.FailRequest{{Namespace: namespace, Key: key, Token: held.GetToken()}}})
			return sameItemErrors(resp.GetResults(), err)
		}},
		{"BatchHeartbeat", func(ctx context.Context, api idemAPI, namespace, key string) error {
			resp, err := api.BatchHeartbeat(ctx, &idemv1.BatchHeartbeatRequest{Requests: []*idemv1.HeartbeatRequest{{Namespace: namespace, Key: key, Token: held.GetToken()}}})
			return sameItemErrors(resp.GetResults(), err)
		}},
		{"BatchLookup", func(ctx context.Context, api idemAPI, namespace, key string) error {
			resp, err := api.BatchLookup(ctx, &idemv1.BatchLookupRequest{Requests: []*idemv1.LookupRequest{{Namespace: namespace, Key: key}}})
			return sameItemErrors(resp.GetResults(), err)
		}},
		{"DeleteRecord", func(ctx context.Context, api idemAPI, namespace, key string) error {
			_, err := api.DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Namespace: namespace, Key: key})
			return err
		}},
	}
	var cases []textCase
	for _, c := range idCalls {
		cases = append(cases,
			textCase{c.rpc + "/namespace", "namespace", "INVALID_NAMESPACE", func(ctx context.Context, api idemAPI, bad string) error {
				return c.call(ctx, api, held.GetNamespace()+bad, held.GetKey())
			}},
			textCase{c.rpc + "/key", "key", "INVALID_KEY", func(ctx context.Context, api idemAPI, bad string) error {
				return c.call(ctx, api, held.GetNamespace(), held.GetKey()+bad)
			}},
		)
	}
	claimant := func(name string, rec *idemv1.Record, key string) textCase {
		return textCase{"Claim/claimant " + name, "claimant", "INVALID_CLAIMANT", func(ctx context.Context, api idemAPI, bad string) error {
			_, err := api.Claim(ctx, &idemv1.ClaimRequest{Namespace: rec.GetNamespace(), Key: key, Claimant: "w-" + bad})
			return err
		}}
	}
	batchClaimant := func(name string, rec *idemv1.Record, key string) textCase {
		return textCase{"BatchClaim/claimant " + name, "claimant", "INVALID_CLAIMANT", func(ctx context.Context, api idemAPI, bad string) error {
			resp, err := api.BatchClaim(ctx, &idemv1.BatchClaimRequest{Requests: []*idemv1.ClaimRequest{{Namespace: rec.GetNamespace(), Key: key, Claimant: "w-" + bad}}})
			return sameItemErrors(resp.GetResults(), err)
		}}
	}
	failWith := func(name string, retryable bool) textCase {
		return textCase{"Fail/error " + name, "error", "INVALID_ERROR", func(ctx context.Context, api idemAPI, bad string) error {
			_, err := api.Fail(ctx, &idemv1.FailRequest{Namespace: held.GetNamespace(), Key: held.GetKey(), Token: held.GetToken(),
				Error: "declined: " + bad, Retryable: retryable})
			return err
		}}
	}
	cases = append(cases,
		claimant("of a new key", held, "new"),
		claimant("of a held record", held, held.GetKey()),
		claimant("that would replay", done, done.GetKey()),
		batchClaimant("of a new key", held, "new"),
		batchClaimant("that would replay", done, done.GetKey()),
		textCase{"BatchFail/error", "error", "INVALID_ERROR", func(ctx context.Context, api idemAPI, bad string) error {
			resp, err := api.BatchFail(ctx, &idemv1.BatchFailRequest{Requests: []*idemv1.FailRequest{{Namespace: held.GetNamespace(), Key: held.GetKey(),
				Token: held.GetToken(), Error: "declined: " + bad}}})
			return sameItemErrors(resp.GetResults(), err)
		}},
		failWith("permanent", false),
		failWith("retryable", true),
		textCase{"ListRecords/namespace", "namespace", "INVALID_NAMESPACE", func(ctx context.Context, api idemAPI, bad string) error {
			_, err := api.ListRecords(ctx, &idemv1.ListRecordsRequest{Namespace: held.GetNamespace() + bad})
			return err
		}},
		textCase{"Stats/namespace", "namespace", "INVALID_NAMESPACE", func(ctx context.Context, api idemAPI, bad string) error {
			_, err := api.Stats(ctx, &idemv1.StatsRequest{Namespace: held.GetNamespace() + bad})
			return err
		}},
	)
	return cases
}

// TestTextFields: every text field of every call (namespace, key, claimant,
// error) with a NUL character, or with bytes that are not UTF-8, is
// INVALID_ARGUMENT with the field's reason, the field and the problem in the
// ErrorInfo's metadata and a message naming both; the store is not called
// and nothing changes, also for a Claim that would only replay.
func TestTextFields(t *testing.T) {
	t.Parallel()
	ts, calls := startCounted(t)
	ctx := testContext(t)
	done := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "done"})
	completed, err := ts.Client.Complete(ctx, &idemv1.CompleteRequest{Namespace: ns, Key: "done", Token: done.GetToken(), Result: []byte("r")})
	if err != nil {
		t.Fatal(err)
	}
	done = completed.GetRecord()
	held := mustAcquire(t, ts.Client, &idemv1.ClaimRequest{Key: "held", Claimant: "holder"})
	callsBefore := calls.len()

	apis := []struct {
		name    string
		api     idemAPI
		bad     string
		problem string
		msg     string
	}{
		{"gRPC with a NUL", viaGRPC{ts.Client, ts.Admin}, "a\x00b", "NUL_CHARACTER", "NUL character (U+0000) at byte"},
		{"direct with a NUL", direct{services.NewService(&hookStore{Store: ts.Store, hook: calls.hook}, services.Config{}, nil), services.NewAdminService(ts.Store, services.Config{}, nil)},
			"\x00", "NUL_CHARACTER", "NUL character (U+0000) at byte"},
		{"direct with invalid UTF-8", direct{services.NewService(&hookStore{Store: ts.Store, hook: calls.hook}, services.Config{}, nil), services.NewAdminService(ts.Store, services.Config{}, nil)},
			"caf\xc3", "INVALID_UTF8", "is not valid UTF-8"},
	}
	for _, api := range apis {
		t.Run(api.name, func(t *testing.T) {
			for _, tc := range textCases(held, done) {
				t.Run(tc.name, func(t *testing.T) {
					st := requireStatus(t, tc.call(ctx, api.api, api.bad), codes.InvalidArgument, tc.reason)
					md := errorInfo(st).GetMetadata()
					if md["field"] != tc.field || md["problem"] != api.problem {
						t.Errorf("ErrorInfo metadata %v; want field %q, problem %q", md, tc.field, api.problem)
					}
					for _, want := range []string{tc.field, api.msg} {
						if !strings.Contains(st.Message(), want) {
							t.Errorf("message %q does not contain %q", st.Message(), want)
						}
					}
				})
			}
		})
	}

	if n := calls.len(); n != callsBefore {
		t.Errorf("the store was called for refused requests: %s", calls)
	}
	if got := mustLookup(t, ts.Client, "held"); !proto.Equal(got, held) {
		t.Errorf("the held record changed:\n got %v\nwant %v", got, held)
	}
	if got := mustLookup(t, ts.Client, "done"); !proto.Equal(got, done) {
		t.Errorf("the completed record changed:\n got %v\nwant %v", got, done)
	}
	if n := countRows(t, ts.DB.Pool, ""); n != 2 {
		t.Errorf("%d records; want the 2 the test made", n)
	}
}
