package gateway

import (
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/server/services"
)

// TestExplainAccepts: what the protobuf JSON mapping allows, explain finds
// nothing wrong with.
func TestExplainAccepts(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{}`,
		` { "namespace" : "jobs" , "key" : "order-1" } `,
		`{"namespace":"jobs","key":"caf\u00e9 \ud83d\ude00 \"q\" \\ \/ \b\f\n\r\t","leaseTtl":"1.5s","retention":null}`,
		`{"namespace":"jobs","key":"k","fingerprint":"YQ","claimant":"w","retention":"86400s","wait":"0s"}`,
		`{"namespace":"jobs","key":"k","fingerprint":"Y-_8","claimant":null}`,
		"{\"key\":\"ключ-ü-😀\"}",
	} {
		if err := protojson.Unmarshal([]byte(body), &idemv1.ClaimRequest{}); err != nil {
			t.Fatalf("%s does not decode with protojson: %v", body, err)
		}
		if err := explain([]byte(body), (&idemv1.ClaimRequest{}).ProtoReflect().Descriptor(), nil); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

// FuzzExplain: explain finds something wrong with exactly the bodies the
// strict decoding (vanguard's codec) refuses, never panics, and says it as
// INVALID_ARGUMENT with an ErrorInfo of domain idem. `go test -fuzz
// FuzzExplain ./server/gateway` searches for more.
func FuzzExplain(f *testing.F) {
	for _, seed := range []string{
		`{"namespace":"jobs","key":"k","leaseTtl":"30s"}`,
		`{"namespace":"jobs","key":"k","leaseTTL":"30s"}`,
		`{"token":"99999999999999999999","result":"not base64"}`,
		`{"key":"\ud800","key":"x"}`,
		"{\"key\":\"caf\xc3\"}",
		`{"completed":{"result":"YQ=="},"released":{}}`,
		`{"requests":[{"key":"a"},{"kee":"b"}]}`,
		`[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]`,
		`{"namespace":"jobs"`,
		`  `,
		`{"a":1e400,"b":-0.0e-0,"c":[true,false,null,{}]}`,
		`"\u00"`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, m := range []proto.Message{&idemv1.CompleteRequest{}, &idemv1.ResolveRecordRequest{}, &idemv1.ListRecordsRequest{}, &idemv1.BatchClaimRequest{}} {
			refused := strictJSON.Unmarshal(body, m.ProtoReflect().New().Interface()) != nil
			err := explain(body, m.ProtoReflect().Descriptor(), nil)
			if (err != nil) != refused {
				t.Fatalf("%q as a %T: the codec refuses it %v; explain says %v", body, m, refused, err)
			}
			if err == nil {
				continue
			}
			st := status.Convert(err)
			var info *errdetails.ErrorInfo
			for _, d := range st.Details() {
				if i, ok := d.(*errdetails.ErrorInfo); ok {
					info = i
				}
			}
			if st.Code() != codes.InvalidArgument || info == nil || info.GetDomain() != services.ErrorDomain || info.GetReason() == "" || st.Message() == "" {
				t.Fatalf("%q: refused with %v, details %v", body, err, st.Details())
			}
		}
	})
}
