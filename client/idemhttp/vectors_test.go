package idemhttp

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// specFile is the language-neutral file every middleware's tests run.
const specFile = "../../clients/scenarios/http.json"

type envelopeVector struct {
	Status         int         `json:"status"`
	Headers        [][2]string `json:"headers"`
	Body           *string     `json:"body"`
	BodyBase64     string      `json:"body_base64"`
	Omitted        bool        `json:"omitted"`
	Envelope       *string     `json:"envelope"`
	EnvelopeBase64 string      `json:"envelope_base64"`
}

func (v envelopeVector) body(t *testing.T) []byte {
	if v.Body != nil {
		return []byte(*v.Body)
	}
	b, err := base64.StdEncoding.DecodeString(v.BodyBase64)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (v envelopeVector) envelope(t *testing.T) []byte {
	if v.Envelope != nil {
		return []byte(*v.Envelope)
	}
	b, err := base64.StdEncoding.DecodeString(v.EnvelopeBase64)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type specVectors struct {
	Keys []struct {
		Value string  `json:"value"`
		Key   *string `json:"key"`
	} `json:"keys"`
	RecordKeys []struct {
		Caller    string `json:"caller"`
		Key       string `json:"key"`
		RecordKey string `json:"record_key"`
	} `json:"record_keys"`
	Fingerprints []struct {
		Method      string            `json:"method"`
		Target      string            `json:"target"`
		Headers     map[string]string `json:"headers"`
		Body        string            `json:"body"`
		Names       []string          `json:"names"`
		Fingerprint string            `json:"fingerprint"`
	} `json:"fingerprints"`
	Envelopes []envelopeVector `json:"envelopes"`
}

type spec struct {
	Version  int `json:"version"`
	Problems []struct {
		Slug   string `json:"slug"`
		Status int    `json:"status"`
		Title  string `json:"title"`
	} `json:"problems"`
	ProblemTypePrefix string `json:"problem_type_prefix"`
	Scenarios         []struct {
		ID        string `json:"id"`
		Title     string `json:"title"`
		Steps     string `json:"steps"`
		Expect    string `json:"expect"`
		Exclusive bool   `json:"exclusive"`
	} `json:"scenarios"`
	Vectors specVectors `json:"vectors"`
}

func loadSpec(t testing.TB) spec {
	t.Helper()
	data, err := os.ReadFile(specFile)
	if err != nil {
		t.Fatal(err)
	}
	var s spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("%s: %v", specFile, err)
	}
	if s.Version != 1 {
		t.Fatalf("%s is version %d; this suite reads version 1", specFile, s.Version)
	}
	return s
}

func TestKeyVectors(t *testing.T) {
	t.Parallel()
	for _, v := range loadSpec(t).Vectors.Keys {
		got, err := ParseKey(v.Value)
		switch {
		case v.Key == nil && err == nil:
			t.Errorf("ParseKey(%q) = %q; want it refused", v.Value, got)
		case v.Key != nil && err != nil:
			t.Errorf("ParseKey(%q): %v; want %q", v.Value, err, *v.Key)
		case v.Key != nil && got != *v.Key:
			t.Errorf("ParseKey(%q) = %q; want %q", v.Value, got, *v.Key)
		}
	}
}

func TestRecordKeyVectors(t *testing.T) {
	t.Parallel()
	for _, v := range loadSpec(t).Vectors.RecordKeys {
		if got := RecordKey(v.Caller, v.Key); got != v.RecordKey {
			t.Errorf("RecordKey(%q, %q) = %q; want %q", v.Caller, v.Key, got, v.RecordKey)
		}
	}
}

func TestFingerprintVectors(t *testing.T) {
	t.Parallel()
	for _, v := range loadSpec(t).Vectors.Fingerprints {
		// Go's server refuses a target it cannot parse (%zz); the others
		// may pass it on, so the vectors have one, and Fingerprint reads
		// RequestURI, the target as sent.
		r, err := http.NewRequest(v.Method, "http://api.example/", strings.NewReader(v.Body))
		if err != nil {
			t.Fatal(err)
		}
		r.RequestURI = v.Target
		for k, val := range v.Headers {
			r.Header.Set(k, val)
		}
		if got := hex.EncodeToString(Fingerprint(r, []byte(v.Body), v.Names)); got != v.Fingerprint {
			t.Errorf("Fingerprint(%s %s, %v, %q, names %v) = %s; want %s", v.Method, v.Target, v.Headers, v.Body, v.Names, got, v.Fingerprint)
		}
	}
}

// TestFingerprintKeepsToTheRequestLine: a handler in front that rewrote
// r.URL (http.StripPrefix) does not change the fingerprint.
func TestFingerprintKeepsToTheRequestLine(t *testing.T) {
	t.Parallel()
	r, _ := http.NewRequest("POST", "http://api.example/v1/payments?x=1", nil)
	r.RequestURI = "/v1/payments?x=1"
	want := Fingerprint(r, nil, nil)
	r.URL.Path, r.URL.RawQuery = "/payments", ""
	if got := Fingerprint(r, nil, nil); !bytes.Equal(got, want) {
		t.Errorf("the fingerprint changed with r.URL")
	}
}

func TestEnvelopeVectors(t *testing.T) {
	t.Parallel()
	for i, v := range loadSpec(t).Vectors.Envelopes {
		want := v.envelope(t)
		s := Stored{Status: v.Status, Headers: latin1Headers(v.Headers), Body: v.body(t), Omitted: v.Omitted}
		if got := s.Encode(); !bytes.Equal(got, want) {
			t.Errorf("envelope %d: Encode = %q; want %q", i, got, want)
		}
		got, err := Decode(want)
		if err != nil {
			t.Errorf("envelope %d: Decode: %v", i, err)
			continue
		}
		if got.Status != s.Status || got.Omitted != s.Omitted || !bytes.Equal(got.Body, s.Body) || len(got.Headers) != len(s.Headers) {
			t.Errorf("envelope %d: Decode = %+v; want %+v", i, got, s)
			continue
		}
		for j := range got.Headers {
			if got.Headers[j] != s.Headers[j] {
				t.Errorf("envelope %d: header %d = %q; want %q", i, j, got.Headers[j], s.Headers[j])
			}
		}
	}
}

// latin1Headers turns the vector's header values (text, each character
// below U+0100) into the bytes a Go header holds.
func latin1Headers(hs [][2]string) [][2]string {
	out := make([][2]string, len(hs))
	for i, h := range hs {
		for j, s := range h {
			b := make([]byte, 0, len(s))
			for _, r := range s {
				b = append(b, byte(r))
			}
			out[i][j] = string(b)
		}
	}
	return out
}

func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		"not an envelope",
		"{\"idem_http\":1,\"status\":201,\"headers\":[]}",                     // no newline
		"{\"status\":201,\"headers\":[]}\n",                                   // no version
		"{\"idem_http\":2,\"status\":201,\"headers\":[]}\n",                   // a later version
		"{\"idem_http\":1,\"status\":101,\"headers\":[]}\n",                   // not a final status
		"{\"idem_http\":1,\"status\":201,\"headers\":[[\"a\"]]}\n",            // not a pair
		"{\"idem_http\":1,\"status\":201,\"headers\":[[\"a\",1]]}\n",          // not strings
		"{\"idem_http\":1,\"status\":201,\"headers\":[[\"a\",\"\u0100\"]]}\n", // not Latin-1
		"{\"idem_http\":1,\"status\":201,\"headers\":[],\"omitted\":true}\nbody",
	} {
		if s, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%q) = %+v; want an error", bad, s)
		}
	}
}

// TestProblemsMatchSpec holds this package's problems to the file's, which
// every language answers alike.
func TestProblemsMatchSpec(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	if s.ProblemTypePrefix != ProblemTypePrefix {
		t.Errorf("ProblemTypePrefix = %q; %s says %q", ProblemTypePrefix, specFile, s.ProblemTypePrefix)
	}
	if len(s.Problems) != len(problems) {
		t.Errorf("%d problems; %s has %d", len(problems), specFile, len(s.Problems))
	}
	for i, want := range s.Problems {
		if i < len(problems) && (problems[i].slug != want.Slug || problems[i].status != want.Status || problems[i].title != want.Title) {
			t.Errorf("problem %d = %+v; %s says %+v", i, problems[i], specFile, want)
		}
	}
}
