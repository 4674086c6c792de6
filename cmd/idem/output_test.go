package main

import (
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// TestMarshalJSONLayout: -o json always has the same layout, whatever
// whitespace protojson chooses for this build.
func TestMarshalJSONLayout(t *testing.T) {
	t.Parallel()
	resp := &idemv1.ClaimResponse{
		Outcome: idemv1.Outcome_OUTCOME_COMPLETED,
		Record: &idemv1.Record{
			Namespace: "jobs",
			Key:       "k1",
			State:     idemv1.State_STATE_COMPLETED,
			Token:     7,
			Attempt:   1,
			Result:    []byte("ok"),
			CreatedAt: &timestamppb.Timestamp{Seconds: 1764579600},
		},
	}
	got, err := marshalJSON(resp)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "outcome": "OUTCOME_COMPLETED",
  "record": {
    "namespace": "jobs",
    "key": "k1",
    "state": "STATE_COMPLETED",
    "token": "7",
    "attempt": 1,
    "result": "b2s=",
    "createdAt": "2025-12-01T09:00:00Z"
  }
}`
	if string(got) != want {
		t.Errorf("marshalJSON =\n%s\nwant\n%s", got, want)
	}
}
