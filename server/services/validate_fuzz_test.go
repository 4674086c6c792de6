package services

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
)

// FuzzValidateClaim: validateClaim never panics; every rejection is
// INVALID_ARGUMENT with an ErrorInfo whose metadata names the field, which
// the message names too; every acceptance is within DESIGN §2's bounds.
// `go test` replays testdata/fuzz/FuzzValidateClaim; `go test -fuzz
// FuzzValidateClaim ./server/services` searches for more.
func FuzzValidateClaim(f *testing.F) {
	f.Add("process_payment", "order-1", []byte("fp"), "worker-1", true, int64(30), int32(0), true, int64(3600), int32(0))
	f.Add("", "", []byte(nil), "", false, int64(0), int32(0), false, int64(0), int32(0))
	f.Add("a", strings.Repeat("k", 257), make([]byte, 65), strings.Repeat("c", 129), true, int64(0), int32(999999999), true, int64(-1), int32(-1))
	f.Add("Bad.NS", "key\x00with\tcontrols", []byte{}, "", true, int64(315576000001), int32(0), true, int64(60), int32(1000000000))
	f.Add("ns", "\xff\xfe", []byte{}, "", false, int64(0), int32(0), false, int64(0), int32(0))

	cfg := DefaultConfig()
	fields := map[string]bool{"namespace": true, "key": true, "fingerprint": true, "claimant": true, "lease_ttl": true, "retention": true}
	f.Fuzz(func(t *testing.T, namespace, key string, fingerprint []byte, claimant string,
		hasLease bool, leaseSecs int64, leaseNanos int32, hasRetention bool, retSecs int64, retNanos int32,
	) {
		req := &idemv1.ClaimRequest{Namespace: namespace, Key: key, Fingerprint: fingerprint, Claimant: claimant}
		if hasLease {
			req.LeaseTtl = &durationpb.Duration{Seconds: leaseSecs, Nanos: leaseNanos}
		}
		if hasRetention {
			req.Retention = &durationpb.Duration{Seconds: retSecs, Nanos: retNanos}
		}
		lease, retention, err := validateClaim(req, cfg)
		if err == nil {
			if lease < limits.MinLeaseTTL || lease > limits.MaxLeaseTTL || retention < limits.MinRetention || retention > limits.MaxRetention {
				t.Fatalf("accepted lease %s, retention %s: out of bounds", lease, retention)
			}
			if len(key) == 0 || len(key) > limits.MaxKeyBytes || len(fingerprint) > limits.MaxFingerprintBytes || len(claimant) > limits.MaxClaimantBytes {
				t.Fatalf("accepted a request out of bounds: %d-byte key, %d-byte fingerprint, %d-byte claimant", len(key), len(fingerprint), len(claimant))
			}
			if !hasLease && lease != cfg.DefaultLeaseTTL || !hasRetention && retention != cfg.DefaultRetention {
				t.Fatalf("defaults not applied: lease %s, retention %s", lease, retention)
			}
			return
		}
		st, ok := status.FromError(err)
		if !ok || st.Code() != codes.InvalidArgument {
			t.Fatalf("rejection %v is not INVALID_ARGUMENT", err)
		}
		var info *errdetails.ErrorInfo
		for _, d := range st.Details() {
			if i, ok := d.(*errdetails.ErrorInfo); ok {
				info = i
			}
		}
		if info == nil || info.GetDomain() != ErrorDomain || info.GetReason() == "" {
			t.Fatalf("rejection %q has no ErrorInfo of domain %q with a reason: %v", st.Message(), ErrorDomain, info)
		}
		field := info.GetMetadata()["field"]
		if !fields[field] {
			t.Fatalf("rejection %q names field %q; want one of the request's", st.Message(), field)
		}
		if !strings.Contains(st.Message(), field) {
			t.Fatalf("message %q does not name the field %q", st.Message(), field)
		}
	})
}

// The fuzz target's bounds check relies on the durations being checked in
// whole: a lease of 24h plus 1ns is out.
func TestValidateClaimBoundsToTheNanosecond(t *testing.T) {
	t.Parallel()
	req := &idemv1.ClaimRequest{Namespace: "ns", Key: "k", LeaseTtl: durationpb.New(limits.MaxLeaseTTL + time.Nanosecond)}
	if _, _, err := validateClaim(req, DefaultConfig()); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("lease of 24h+1ns: %v; want INVALID_ARGUMENT", err)
	}
}
