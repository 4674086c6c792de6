package server

import (
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// TestDecodeJSONRequestAccepts: what the protobuf JSON mapping allows, the
// strict decoding allows too, to the same message.
func TestDecodeJSONRequestAccepts(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{}`,
		` { "namespace" : "jobs" , "key" : "order-1" } `,
		`{"namespace":"jobs","key":"caf\u00e9 \ud83d\ude00 \"q\" \\ \/ \b\f\n\r\t","leaseTtl":"1.5s","retention":null}`,
		`{"namespace":"jobs","key":"k","fingerprint":"YQ","claimant":"w","retention":"86400s","wait":"0s"}`,
		`{"namespace":"jobs","key":"k","fingerprint":"Y-_8","claimant":null}`,
		"{\"key\":\"ключ-ü-😀\"}",
	} {
		got, err := decodeJSONRequest([]byte(body), (&idemv1.ClaimRequest{}).ProtoReflect().Descriptor(), nil)
		if err != nil {
			t.Errorf("%s: %v", body, err)
			continue
		}
		var want idemv1.ClaimRequest
		if err := protojson.Unmarshal([]byte(body), &want); err != nil {
			t.Fatalf("%s does not decode with protojson: %v", body, err)
		}
		if !proto.Equal(got, &want) {
			t.Errorf("%s: %v; protojson gives %v", body, got, &want)
		}
	}
}

// FuzzDecodeJSONRequest: parseJSON agrees with encoding/json on what is
// JSON (within its depth bound); decodeJSONRequest never panics; what it
// refuses is INVALID_ARGUMENT with an ErrorInfo of domain idem, and what
// it accepts, vanguard's lenient decoding reads as the same message (so
// nothing it checked is lost on the way to the server). `go test -fuzz
// FuzzDecodeJSONRequest ./server` searches for more.
func FuzzDecodeJSONRequest(f *testing.F) {
	for _, seed := range []string{
		`{"namespace":"jobs","key":"k","leaseTtl":"30s"}`,
		`{"namespace":"jobs","key":"k","leaseTTL":"30s"}`,
		`{"token":"99999999999999999999","result":"not base64"}`,
		`{"key":"\ud800","key":"x"}`,
		"{\"key\":\"caf\xc3\"}",
		`{"completed":{"result":"YQ=="},"released":{}}`,
		`[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]`,
		`{"namespace":"jobs"`,
		`  `,
		`{"a":1e400,"b":-0.0e-0,"c":[true,false,null,{}]}`,
		`"\u00"`,
	} {
		f.Add([]byte(seed))
	}
	lenient := protojson.UnmarshalOptions{DiscardUnknown: true}
	f.Fuzz(func(t *testing.T, body []byte) {
		v, err := parseJSON(body)
		if err == nil && !json.Valid(body) {
			t.Fatalf("parseJSON accepts %q, which is not JSON", body)
		}
		if err != nil && json.Valid(body) && !strings.Contains(err.Error(), "deep") {
			t.Fatalf("parseJSON refuses %q, which is JSON: %v", body, err)
		}
		_ = v
		for _, m := range []proto.Message{&idemv1.CompleteRequest{}, &idemv1.ResolveRecordRequest{}, &idemv1.ListRecordsRequest{}} {
			got, err := decodeJSONRequest(body, m.ProtoReflect().Descriptor(), nil)
			if err != nil {
				st := status.Convert(err)
				var info *errdetails.ErrorInfo
				for _, d := range st.Details() {
					if i, ok := d.(*errdetails.ErrorInfo); ok {
						info = i
					}
				}
				if st.Code() != codes.InvalidArgument || info == nil || info.GetDomain() != ErrorDomain || info.GetReason() == "" || st.Message() == "" {
					t.Fatalf("%q: refused with %v, details %v", body, err, st.Details())
				}
				continue
			}
			want := m.ProtoReflect().New().Interface()
			if err := lenient.Unmarshal(body, want); err != nil || !proto.Equal(got, want) {
				t.Fatalf("%q: accepted as %v; the lenient decoding gives %v, %v", body, got, want, err)
			}
		}
	})
}
