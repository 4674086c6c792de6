package config_test

import (
	"crypto/x509/pkix"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/config"
)

// hashA and hashB are token hashes in the file's format.
var (
	hashA = config.HashToken("idem_token-a")
	hashB = config.HashToken("idem_token-b")
)

// readmeExample is the example of docs/security.md's config file section,
// with real hashes.
func readmeExample() string {
	return `# idem.yaml
tenants:
  - name: payments
    tokens: ["` + hashA + `", "` + hashB + `"]
    namespaces: ["process_payment", "refund.*"]   # optional allow-list, glob
    rate_limit: {per_second: 500, burst: 1000}     # optional
    max_result_bytes: 16384                        # optional, ≤ the server's
    admin: false                                   # AdminService over its own records
  - name: billing
    client_cert_subjects: ["CN=billing-worker,O=Acme"]
  - name: ops
    tokens: ["` + config.HashToken("idem_ops") + `"]
    admin: true
  - name: platform
    tokens: ["` + config.HashToken("idem_platform") + `"]
    named_tokens:
      - {name: alice@example.com, token: "` + config.HashToken("idem_alice") + `"}
    operator: true
`
}

func TestParseTheReadmeExample(t *testing.T) {
	t.Parallel()
	f, err := config.Parse([]byte(readmeExample()))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := &config.File{Tenants: []config.Tenant{
		{
			Name:           "payments",
			Tokens:         []string{hashA, hashB},
			Namespaces:     []string{"process_payment", "refund.*"},
			RateLimit:      &config.RateLimit{PerSecond: 500, Burst: 1000},
			MaxResultBytes: 16384,
		},
		{Name: "billing", ClientCertSubjects: []string{"CN=billing-worker,O=Acme"}},
		{Name: "ops", Tokens: []string{config.HashToken("idem_ops")}, Admin: true},
		{Name: "platform", Tokens: []string{config.HashToken("idem_platform")}, Operator: true,
			NamedTokens: []config.NamedToken{{Name: "alice@example.com", Token: config.HashToken("idem_alice")}}},
	}}
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("Parse = %+v\nwant %+v", f, want)
	}
	if !f.UsesClientCerts() {
		t.Error("UsesClientCerts = false; billing names a subject")
	}
}

// TestParseErrors: every broken rule is one line that names the field by
// its path.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	tenant := func(extra string) string {
		return "tenants:\n  - name: ok\n    tokens: [\"" + hashA + "\"]\n  - name: second\n" + extra
	}
	cases := []struct {
		name, yaml, want string
	}{
		{"empty file", "", "the file is empty"},
		{"only a comment", "# nothing\n", "the file is empty"},
		{"not a mapping", "- a\n- b\n", "must be a mapping"},
		{"syntax error", "tenants: [\n", "line"},
		{"no tenants", "tenants: []\n", "tenants: empty"},
		{"null tenants", "tenants:\n", "tenants: empty"},
		{"unknown top-level field", "tenant:\n  - name: a\n", "tenant: unknown field (line 1); known fields here: policies, tenants"},
		{"unknown tenant field", tenant("    tokenz: [\"x\"]\n"), "tenants[1].tokenz: unknown field (line 5)"},
		{"unknown rate_limit field", tenant("    tokens: [\"" + hashB + "\"]\n    rate_limit: {per_second: 1, brust: 2}\n"), "tenants[1].rate_limit.brust: unknown field"},
		{"wrong type", tenant("    tokens: [\"" + hashB + "\"]\n    max_result_bytes: lots\n"), `tenants[1].max_result_bytes: want an integer, got "lots" (line 6)`},
		{"wrong type for a bool", tenant("    tokens: [\"" + hashB + "\"]\n    admin: yes please\n"), `tenants[1].admin: want true or false, got "yes please" (line 6)`},
		{"tenants not a list", "tenants: 5\n", "tenants: want a list of mappings, got 5 (line 1)"},
		{"duplicate key", "tenants:\n  - name: a\n    name: b\n", "already defined"},
		{"missing name", "tenants:\n  - tokens: [\"" + hashA + "\"]\n", "tenants[0].name: missing"},
		{"bad name", "tenants:\n  - name: Payments\n    tokens: [\"" + hashA + "\"]\n", `tenants[0].name: "Payments" must match`},
		{"duplicate name", tenant("    name: ok\n"), "already defined"},
		{"duplicate tenant", "tenants:\n  - name: a\n    tokens: [\"" + hashA + "\"]\n  - name: a\n    tokens: [\"" + hashB + "\"]\n", `tenants[1].name: "a" is also the name of tenants[0]`},
		{"no credentials", tenant(""), `tenants[1]: tenant "second" has no tokens, named_tokens or client_cert_subjects`},
		{"named token without a name", tenant("    named_tokens: [{token: \"" + hashB + "\"}]\n"), "tenants[1].named_tokens[0].name: missing"},
		{"named token without a token", tenant("    named_tokens: [{name: alice}]\n"), "tenants[1].named_tokens[0].token: missing"},
		{"named token in plaintext", tenant("    named_tokens: [{name: alice, token: idem_my-secret-token}]\n"), `tenants[1].named_tokens[0].token: want "sha256:<64 hex digits>"`},
		{"named token duplicates a token", tenant("    named_tokens: [{name: alice, token: \"" + hashA + "\"}]\n"), "tenants[1].named_tokens[0].token: duplicate token hash; tenants[0].tokens[0] has it too"},
		{"named token name too long", tenant("    named_tokens: [{name: " + strings.Repeat("a", 129) + ", token: \"" + hashB + "\"}]\n"), "tenants[1].named_tokens[0].name: 129 bytes; the limit is 128"},
		{"named token name with a newline", tenant("    named_tokens: [{name: \"al\\nice\", token: \"" + hashB + "\"}]\n"), "tenants[1].named_tokens[0].name: \"al\\nice\" has a control character"},
		{"named token unknown field", tenant("    named_tokens: [{nmae: alice, token: \"" + hashB + "\"}]\n"), "tenants[1].named_tokens[0].nmae: unknown field (line 5); known fields here: name, token"},
		{"plaintext token", tenant("    tokens: [\"idem_my-secret-token\"]\n"), `tenants[1].tokens[0]: want "sha256:<64 hex digits>"`},
		{"short hash", tenant("    tokens: [\"sha256:abcd\"]\n"), `tenants[1].tokens[0]: want "sha256:<64 hex digits>"`},
		{"not hex", tenant("    tokens: [\"sha256:" + strings.Repeat("zz", 32) + "\"]\n"), `tenants[1].tokens[0]: want`},
		{"other algorithm", tenant("    tokens: [\"md5:" + strings.Repeat("ab", 32) + "\"]\n"), `tenants[1].tokens[0]: want`},
		{"duplicate token across tenants", tenant("    tokens: [\"" + hashA + "\"]\n"), "tenants[1].tokens[0]: duplicate token hash; tenants[0].tokens[0] has it too"},
		{"duplicate token in upper case", tenant("    tokens: [\"sha256:" + strings.ToUpper(strings.TrimPrefix(hashA, "sha256:")) + "\"]\n"), "tenants[1].tokens[0]: duplicate token hash"},
		{"duplicate token in a tenant", "tenants:\n  - name: a\n    tokens: [\"" + hashA + "\", \"" + hashA + "\"]\n", "tenants[0].tokens[1]: duplicate token hash; tenants[0].tokens[0]"},
		{"bad glob", tenant("    tokens: [\"" + hashB + "\"]\n    namespaces: [\"refund.[\"]\n"), `tenants[1].namespaces[0]: "refund.[" is not a valid glob`},
		{"glob that never matches", tenant("    tokens: [\"" + hashB + "\"]\n    namespaces: [\"Refund\"]\n"), `tenants[1].namespaces[0]: "Refund" can never match`},
		{"empty glob", tenant("    tokens: [\"" + hashB + "\"]\n    namespaces: [\"\"]\n"), `tenants[1].namespaces[0]: empty pattern`},
		{"empty allow-list", tenant("    tokens: [\"" + hashB + "\"]\n    namespaces: []\n"), "tenants[1].namespaces: empty, which would allow nothing"},
		{"zero rate", tenant("    tokens: [\"" + hashB + "\"]\n    rate_limit: {per_second: 0, burst: 5}\n"), "tenants[1].rate_limit.per_second: 0; it must be a number above 0"},
		{"infinite rate", tenant("    tokens: [\"" + hashB + "\"]\n    rate_limit: {per_second: .inf, burst: 5}\n"), "tenants[1].rate_limit.per_second: +Inf"},
		{"NaN rate", tenant("    tokens: [\"" + hashB + "\"]\n    rate_limit: {per_second: .nan, burst: 5}\n"), "tenants[1].rate_limit.per_second: NaN"},
		{"no burst", tenant("    tokens: [\"" + hashB + "\"]\n    rate_limit: {per_second: 5}\n"), "tenants[1].rate_limit.burst: 0; it must be at least 1"},
		{"negative result limit", tenant("    tokens: [\"" + hashB + "\"]\n    max_result_bytes: -1\n"), "tenants[1].max_result_bytes: -1"},
		{"subject without =", tenant("    client_cert_subjects: [\"payments-worker\"]\n"), `tenants[1].client_cert_subjects[0]: "payments-worker" is not a subject`},
		{"subject with spaces", tenant("    client_cert_subjects: [\"CN=w, O=Acme\"]\n"), `tenants[1].client_cert_subjects[0]: "CN=w, O=Acme" has spaces`},
		{"duplicate subject", "tenants:\n  - name: a\n    client_cert_subjects: [\"CN=w\"]\n  - name: b\n    client_cert_subjects: [\"CN=w\"]\n", `tenants[1].client_cert_subjects[0]: duplicate subject "CN=w"; tenants[0].client_cert_subjects[0] has it too`},
		{"a mapping merging itself", "tenants:\n  - &common\n    <<: *common\n    name: a\n", "anchor 'common' value contains itself"},
		{"a merge bomb", mergeBomb(), "merges mappings (<<) too many times over"},
		{"policy without namespaces", tenant("    tokens: [\"" + hashB + "\"]\n    policies:\n      - lease_ttl: 30s\n"), "tenants[1].policies[0].namespaces: missing"},
		{"policy with a bad glob", "policies:\n  - namespaces: [\"Pay\"]\n", `policies[0].namespaces[0]: "Pay" can never match`},
		{"policy retention too short", "policies:\n  - namespaces: [mail]\n    retention: 1s\n", "policies[0].retention: 1s is outside 1m0s–2160h0m0s (line 3)"},
		{"policy max lease too long", "policies:\n  - namespaces: [mail]\n    max_lease_ttl: 48h\n", "policies[0].max_lease_ttl: 48h0m0s is outside 1s–24h0m0s"},
		{"policy lease too short", "policies:\n  - namespaces: [mail]\n    lease_ttl: 10ms\n", "policies[0].lease_ttl: 10ms is outside 1s–24h0m0s"},
		{"unknown on_lease_expiry", "policies:\n  - namespaces: [mail]\n    on_lease_expiry: retyr\n", `policies[0].on_lease_expiry: "retyr"; want`},
		{"unknown on_unfinished_step", "policies:\n  - namespaces: [mail]\n    on_unfinished_step: retry\n", `policies[0].on_unfinished_step: "retry"; want "rerun" or "hold"`},
		{"top-level policies beside tenants", "tenants:\n  - name: a\n    tokens: [\"" + hashA + "\"]\npolicies:\n  - namespaces: [mail]\n", "policies: top-level policies are for the tenant \"default\""},
		{"two documents", "tenants:\n  - name: a\n    tokens: [\"" + hashA + "\"]\n---\ntenants: []\n", "more than one YAML document"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := config.Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", f)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error is more than one line:\n%s", msg)
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q; want it to contain %q", msg, tc.want)
			}
			if strings.Contains(msg, "idem_my-secret-token") {
				t.Errorf("error %q echoes a token", msg)
			}
		})
	}
}

// TestParsePolicies: a file of policies alone is the default tenant's; a
// tenant's policies keep their order.
func TestParsePolicies(t *testing.T) {
	t.Parallel()
	f, err := config.Parse([]byte(`policies:
  - namespaces: ["payments.*"]
    lease_ttl: 30s
    max_lease_ttl: 10m
    retention: 720h
    on_lease_expiry: retry
    on_unfinished_step: hold
  - namespaces: [mail, "news.*"]
    max_lease_ttl: 1m
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := &config.File{Policies: []config.Policy{
		{Namespaces: []string{"payments.*"}, LeaseTTL: 30 * time.Second, MaxLeaseTTL: 10 * time.Minute, Retention: 720 * time.Hour, OnLeaseExpiry: "retry", OnUnfinishedStep: "hold"},
		{Namespaces: []string{"mail", "news.*"}, MaxLeaseTTL: time.Minute},
	}}
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("Parse = %+v\nwant %+v", f, want)
	}
	if got := f.Policies[1].PolicyName(); got != "mail,news.*" {
		t.Errorf("PolicyName = %q; want %q", got, "mail,news.*")
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "idem.yaml")
	if err := os.WriteFile(good, []byte(readmeExample()), 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err := config.Load(good); err != nil || len(f.Tenants) != 4 {
		t.Fatalf("Load: %v, %v", f, err)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("tenants:\n  - name: a\n    tokens: [\"nope\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(bad)
	if err == nil || !strings.HasPrefix(err.Error(), "config "+bad+": tenants[0].tokens[0]: want") {
		t.Fatalf("Load(bad) = %v; want an error naming the file and the field", err)
	}
	_, err = config.Load(filepath.Join(dir, "missing.yaml"))
	if err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("Load(missing) = %v; want an error naming the file", err)
	}
}

func TestCheckMaxResultBytes(t *testing.T) {
	t.Parallel()
	f, err := config.Parse([]byte(readmeExample()))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.CheckMaxResultBytes(16384); err != nil {
		t.Errorf("at the server's limit: %v", err)
	}
	err = f.CheckMaxResultBytes(16383)
	if err == nil || !strings.Contains(err.Error(), "tenants[0].max_result_bytes: 16384 is above the server's --max-result-bytes (16383)") {
		t.Errorf("above the server's limit: %v", err)
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		tok, err := config.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(tok, "idem_") || len(tok) != len("idem_")+43 {
			t.Fatalf("token %q: want idem_ and 43 base64url characters (256 bits)", tok)
		}
		if seen[tok] {
			t.Fatalf("token %q made twice", tok)
		}
		seen[tok] = true
		h := config.HashToken(tok)
		if _, ok := config.ParseTokenHash(h); !ok {
			t.Fatalf("HashToken(%q) = %q does not parse", tok, h)
		}
		if strings.Contains(h, tok) {
			t.Fatalf("hash %q contains the token", h)
		}
	}
	// The known SHA-256 of "abc".
	if got, want := config.HashToken("abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Errorf("HashToken(abc) = %s; want %s", got, want)
	}
}

// TestParseMergeKeys: YAML anchors and merge keys share settings between
// tenants, and an unknown field inside a merged mapping is still caught.
func TestParseMergeKeys(t *testing.T) {
	t.Parallel()
	f, err := config.Parse([]byte(`tenants:
  - &limited
    name: a
    tokens: ["` + hashA + `"]
    rate_limit: {per_second: 10, burst: 20}
  - <<: *limited
    name: b
    tokens: ["` + hashB + `"]
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if rl := f.Tenants[1].RateLimit; f.Tenants[1].Name != "b" || rl == nil || rl.Burst != 20 {
		t.Fatalf("tenant b = %+v; want a's rate limit merged in", f.Tenants[1])
	}
	_, err = config.Parse([]byte(`tenants:
  - &limited
    name: a
    tokens: ["` + hashA + `"]
    rate_limt: {per_second: 10, burst: 20}
  - <<: *limited
    name: b
`))
	if err == nil || !strings.Contains(err.Error(), "tenants[0].rate_limt: unknown field") {
		t.Fatalf("Parse = %v; want the unknown field named", err)
	}
}

// TestParseSubjectWithAnEscapedComma: RFC 2253 escapes a comma inside a
// value ("O=Acme\, Inc."), which is not a spaced separator.
func TestParseSubjectWithAnEscapedComma(t *testing.T) {
	t.Parallel()
	subj := pkix.Name{CommonName: "w", Organization: []string{"Acme, Inc."}}.String()
	if subj != `CN=w,O=Acme\, Inc.` {
		t.Fatalf("Go prints the subject as %q", subj)
	}
	f, err := config.Parse([]byte("tenants:\n  - name: a\n    client_cert_subjects: ['" + subj + "']\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := f.Tenants[0].ClientCertSubjects[0]; got != subj {
		t.Fatalf("subject %q; want %q", got, subj)
	}
}

// mergeBomb is a file whose merge keys would have a walk visit 10⁶ mappings.
func mergeBomb() string {
	var b strings.Builder
	b.WriteString("tenants:\n  - &t0 {name: a, tokens: [\"" + hashA + "\"]}\n")
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(&b, "  - &t%d {<<: [", i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*t%d", i-1)
		}
		fmt.Fprintf(&b, "], name: n%d}\n", i)
	}
	return b.String()
}

// TestParsePositionedErrors: an error names the field by its path and the
// line it is on, in words of the file rather than of Go or of the YAML
// library.
func TestParsePositionedErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, yaml, want string
	}{
		{"wrong type", "tenants:\n  - name: a\n    tokens: [\"" + hashA + "\"]\n    max_result_bytes: lots\n",
			`tenants[0].max_result_bytes: want an integer, got "lots" (line 4)`},
		{"wrong type in a nested mapping", "tenants:\n  - name: a\n    tokens: [\"" + hashA + "\"]\n    rate_limit:\n      per_second: fast\n",
			`tenants[0].rate_limit.per_second: want a number, got "fast" (line 5)`},
		{"a list for a string", "tenants:\n  - name: [a]\n", "tenants[0].name: want a string, got a list (line 2)"},
		{"a mapping for a list", "tenants:\n  - name: a\n    tokens: {a: b}\n", "tenants[0].tokens: want a list of strings, got a mapping (line 3)"},
		{"a long string is not echoed whole", "tenants:\n  - name: a\n    tokens: idem_my-secret-token\n",
			`tenants[0].tokens: want a list of strings, got "idem_my…" (line 3)`},
		{"unknown field", "tenants:\n  - name: a\n    tokens: [\"" + hashA + "\"]\n    rate_limit: {per_second: 1, brust: 2}\n",
			"tenants[0].rate_limit.brust: unknown field (line 4); known fields here: burst, per_second"},
		{"an anchor outside the known fields", "defaults: &d {burst: 1}\ntenants: []\n", "defaults: unknown field (line 1); known fields here: policies, tenants"},
		{"duplicate key", "tenants:\n  - name: a\n    tokens: [\"" + hashA + "\"]\n    name: b\n",
			"tenants[0].name: already defined at line 2; give each key once (line 4)"},
		{"duplicate tenant", "tenants:\n  - name: a\n    tokens: [\"" + hashA + "\"]\n  - name: a\n    tokens: [\"" + hashB + "\"]\n",
			`tenants[1].name: "a" is also the name of tenants[0] (line 4)`},
		{"missing field, on its mapping's line", "tenants:\n  - name: a\n    tokens: [\"" + hashA + "\"]\n    rate_limit: {per_second: 5}\n",
			"tenants[0].rate_limit.burst: 0; it must be at least 1 (line 4)"},
		{"a list item", "tenants:\n  - name: a\n    tokens:\n      - \"" + hashA + "\"\n      - \"sha256:abcd\"\n",
			`tenants[0].tokens[1]: want "sha256:<64 hex digits>" (the hash ` + "`idemd token new`" + ` prints, never the token itself) (line 5)`},
		{"an empty item is dropped", "tenants:\n  -\n  - name: Payments\n", `tenants[0].name: "Payments" must match ^[a-z0-9][a-z0-9_.-]{0,63}$ (line 3)`},
		{"a policy lease below its bound", "tenants:\n  - name: a\n    tokens: [\"" + hashA + "\"]\n    policies:\n      - namespaces: [\"payments.*\"]\n        lease_ttl: 30s\n        max_lease_ttl: 10s\n",
			"tenants[0].policies[0].max_lease_ttl: 10s is below the policy's lease_ttl (30s); raise it or lower lease_ttl (line 7)"},
		{"a policy lease out of bounds", "policies:\n  - namespaces: [mail]\n    lease_ttl: 25h\n",
			"policies[0].lease_ttl: 25h0m0s is outside 1s–24h0m0s (line 3)"},
		{"a policy duration of the wrong type", "policies:\n  - namespaces: [mail]\n    retention: forever\n",
			`policies[0].retention: want a duration (30s, 5m, 1h30m), got "forever" (line 3)`},
		{"a merge key with a scalar", "tenants:\n  - <<: 5\n    name: a\n", "tenants[0].<<: a merge key takes a mapping, or a list of mappings, to merge in (line 2)"},
		{"a merged value of the wrong type", "tenants:\n  - &a\n    name: a\n    tokens: [\"" + hashA + "\"]\n  - <<: [{admin: maybe}, *a]\n    name: b\n",
			`tenants[1].admin: want true or false, got "maybe" (line 5)`},
		{"an operator that is not true or false", "tenants:\n  - name: root\n    tokens: [\"" + hashA + "\"]\n    operator: all\n",
			`tenants[0].operator: want true or false, got "all" (line 4)`},
		{"an operator with an allow-list", "tenants:\n  - name: a\n    tokens: [\"" + hashA + "\"]\n  - name: root\n    tokens: [\"" + hashB + "\"]\n    operator: true\n    namespaces: [\"jobs.*\"]\n",
			`tenants[1].namespaces: tenant "root" is an operator, which manages every tenant's namespaces; drop namespaces, or give the operator a tenant entry of its own (line 7)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := config.Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", f)
			}
			if err.Error() != tc.want {
				t.Errorf("error %q\nwant        %q", err, tc.want)
			}
		})
	}
}

// TestParseOperator: operator: true is read, and implies admin.
func TestParseOperator(t *testing.T) {
	t.Parallel()
	f, err := config.Parse([]byte("tenants:\n  - name: root\n    tokens: [\"" + hashA + "\"]\n    operator: true\n  - name: ops\n    tokens: [\"" + hashB + "\"]\n    admin: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	root, ops := f.Tenants[0], f.Tenants[1]
	if !root.Operator || !root.IsAdmin() || root.Admin {
		t.Errorf("root = %+v, IsAdmin %v; want an operator, admin by implication", root, root.IsAdmin())
	}
	if ops.Operator || !ops.IsAdmin() {
		t.Errorf("ops = %+v, IsAdmin %v; want an admin that is no operator", ops, ops.IsAdmin())
	}
	// A guess at the field's name is told the one there is.
	_, err = config.Parse([]byte("tenants:\n  - name: root\n    tokens: [\"" + hashA + "\"]\n    role: operator\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "tenants[0].role: unknown field (line 4); known fields here: ") || !strings.Contains(err.Error(), " operator,") {
		t.Errorf("role: operator: %v; want an unknown field that lists operator", err)
	}
}

// TestParseNamedTokens: a tenant's named tokens, beside its plain tokens or
// alone, each with the name of who holds it; two of one name (a rotation)
// are allowed.
func TestParseNamedTokens(t *testing.T) {
	t.Parallel()
	hashC := config.HashToken("idem_token-c")
	f, err := config.Parse([]byte("tenants:\n  - name: ops\n    tokens: [\"" + hashA + "\"]\n    operator: true\n" +
		"    named_tokens:\n      - {name: alice@example.com, token: \"" + hashB + "\"}\n      - name: alice@example.com\n        token: \"" + hashC + "\"\n" +
		"  - name: payments\n    named_tokens: [{name: Zoë (on call), token: \"" + config.HashToken("idem_token-d") + "\"}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []config.NamedToken{{Name: "alice@example.com", Token: hashB}, {Name: "alice@example.com", Token: hashC}}
	if got := f.Tenants[0].NamedTokens; !reflect.DeepEqual(got, want) {
		t.Errorf("ops's named_tokens = %+v, want %+v", got, want)
	}
	if got := f.Tenants[1].NamedTokens; len(got) != 1 || got[0].Name != "Zoë (on call)" {
		t.Errorf("payments's named_tokens = %+v", got)
	}
}

// TestParseMergedFieldsYield: a key of the mapping itself wins over the
// same key merged in, and the first of several merged mappings wins, so a
// merged value that is overridden is never checked, as the decoder never
// reads it.
func TestParseMergedFieldsYield(t *testing.T) {
	t.Parallel()
	f, err := config.Parse([]byte(`tenants:
  - name: a
    tokens: ["` + hashA + `"]
  - <<: [{max_result_bytes: 100, admin: true}, {max_result_bytes: lots, admin: nope}]
    name: b
    tokens: ["` + hashB + `"]
    admin: false
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if b := f.Tenants[1]; b.MaxResultBytes != 100 || b.Admin {
		t.Fatalf("tenant b = %+v; want max_result_bytes 100 from the first merged mapping, admin false from its own", b)
	}
}
