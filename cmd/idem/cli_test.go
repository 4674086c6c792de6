package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testcerts"
	"github.com/idemhq/idem/internal/testsupport/testserver"
)

// TestClaimCompleteReplay is a worker's happy path in table mode: the token
// alone on stdout, people's messages on stderr, and the replay afterwards.
func TestClaimCompleteReplay(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := f.idem("claim", "-n", "jobs", "-k", "order-1", "--lease-ttl", "30s", "--retention", "1h", "--claimant", "me")
	r.must(t, 0, "claim")
	token := strings.TrimSpace(r.stdout)
	if !regexp.MustCompile(`^\d+\n$`).MatchString(r.stdout) {
		t.Fatalf("claim stdout %q; want the lease token alone", r.stdout)
	}
	if !strings.Contains(r.stderr, "acquired jobs/order-1 with lease token "+token+" (attempt 1)") {
		t.Errorf("claim stderr %q does not say what was acquired", r.stderr)
	}
	// The same claimant gets the same token back while its lease lives.
	if again := f.claim("jobs", "order-1", "--claimant", "me"); again != token {
		t.Errorf("claim repeated by the same claimant got token %s; want %s", again, token)
	}

	r = f.idem("complete", "-n", "jobs", "-k", "order-1", "--lease-token", token, "--result", "ok")
	r.must(t, 0, "complete")
	if r.stdout != "" || !strings.Contains(r.stderr, "completed jobs/order-1 with token "+token) {
		t.Errorf("complete: stdout %q, stderr %q; want nothing on stdout and a line on stderr", r.stdout, r.stderr)
	}

	r = f.idem("claim", "-n", "jobs", "-k", "order-1").must(t, int(exitCompleted), "claim after complete")
	if r.stdout != "" {
		t.Errorf("a replayed claim printed %q on stdout; want nothing without --result-out", r.stdout)
	}
	r = f.idem("claim", "-n", "jobs", "-k", "order-1", "--result-out", "-").must(t, int(exitCompleted), "claim --result-out -")
	if r.stdout != "ok" {
		t.Errorf("claim --result-out - printed %q; want the stored result ok", r.stdout)
	}

	r = f.idem("lookup", "-n", "jobs", "-k", "order-1").must(t, 0, "lookup")
	for _, want := range []string{"state             COMPLETED", "token             " + token, `result            "ok"`, "claimant          me", "error             -"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("lookup table lacks %q:\n%s", want, r.stdout)
		}
	}

	// -q leaves stderr to errors.
	r = f.idem("-q", "claim", "-n", "jobs", "-k", "order-1").must(t, int(exitCompleted), "claim -q")
	if r.stderr != "" {
		t.Errorf("claim -q printed %q on stderr; want nothing", r.stderr)
	}
}

// TestJSONOutput parses every command's -o json output back into the
// generated types and checks its fields, and the JSON names themselves.
func TestJSONOutput(t *testing.T) {
	t.Parallel()
	f := setup(t)

	r := f.idem("-o", "json", "claim", "-n", "jobs", "-k", "j1", "--lease-ttl", "1m", "--fingerprint", "0a0b").must(t, 0, "claim -o json")
	var claim idemv1.ClaimResponse
	parseJSON(t, r.stdout, &claim)
	rec := claim.GetRecord()
	if claim.GetOutcome() != idemv1.Outcome_OUTCOME_ACQUIRED || rec.GetNamespace() != "jobs" || rec.GetKey() != "j1" ||
		rec.GetState() != idemv1.State_STATE_PROCESSING || rec.GetToken() <= 0 || rec.GetAttempt() != 1 ||
		!bytes.Equal(rec.GetFingerprint(), []byte{0x0a, 0x0b}) || rec.GetLeaseExpiresAt() == nil {
		t.Fatalf("claim -o json = %v", &claim)
	}
	if d := rec.GetLeaseExpiresAt().AsTime().Sub(rec.GetCreatedAt().AsTime()); d != time.Minute {
		t.Errorf("lease of %s; want the --lease-ttl of 1m", d)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatal(err)
	}
	rawRecord := raw["record"].(map[string]any)
	if _, ok := rawRecord["leaseExpiresAt"]; !ok {
		t.Errorf("record has no leaseExpiresAt: the JSON names must be the proto's camelCase ones: %s", r.stdout)
	}
	if _, ok := rawRecord["expiresAt"]; ok {
		t.Errorf("record has expiresAt while PROCESSING: unset fields must be left out: %s", r.stdout)
	}
	if raw["outcome"] != "OUTCOME_ACQUIRED" || rawRecord["token"] != strconv.FormatInt(rec.GetToken(), 10) {
		t.Errorf("outcome %v, token %v: want enum names and int64 as strings", raw["outcome"], rawRecord["token"])
	}
	token := strconv.FormatInt(rec.GetToken(), 10)

	r = f.idem("-o", "json", "claim", "-n", "jobs", "-k", "j1").must(t, int(exitInProgress), "second claim -o json")
	var busy idemv1.ClaimResponse
	parseJSON(t, r.stdout, &busy)
	if busy.GetOutcome() != idemv1.Outcome_OUTCOME_IN_PROGRESS || busy.GetRetryAfter().AsDuration() <= 0 {
		t.Errorf("in-progress claim -o json = %v; want IN_PROGRESS with retryAfter", &busy)
	}

	r = f.idem("-o", "json", "heartbeat", "-n", "jobs", "-k", "j1", "--lease-token", token, "--lease-ttl", "2h").must(t, 0, "heartbeat -o json")
	var hb idemv1.HeartbeatResponse
	parseJSON(t, r.stdout, &hb)
	if !hb.GetRecord().GetLeaseExpiresAt().AsTime().After(rec.GetLeaseExpiresAt().AsTime().Add(time.Hour)) {
		t.Errorf("heartbeat --lease-ttl 2h left the lease at %s; want about two hours from now", hb.GetRecord().GetLeaseExpiresAt().AsTime())
	}

	r = f.idem("-o", "json", "complete", "-n", "jobs", "-k", "j1", "--lease-token", token, "--result", `{"charge":"ch_1"}`).must(t, 0, "complete -o json")
	var done idemv1.CompleteResponse
	parseJSON(t, r.stdout, &done)
	if done.GetRecord().GetState() != idemv1.State_STATE_COMPLETED || string(done.GetRecord().GetResult()) != `{"charge":"ch_1"}` ||
		done.GetRecord().GetCompletedAt() == nil || done.GetRecord().GetExpiresAt() == nil {
		t.Errorf("complete -o json = %v", &done)
	}

	r = f.idem("-o", "json", "claim", "-n", "jobs", "-k", "j1").must(t, int(exitCompleted), "replayed claim -o json")
	var replay idemv1.ClaimResponse
	parseJSON(t, r.stdout, &replay)
	if replay.GetOutcome() != idemv1.Outcome_OUTCOME_COMPLETED || string(replay.GetRecord().GetResult()) != `{"charge":"ch_1"}` {
		t.Errorf("replayed claim -o json = %v", &replay)
	}

	r = f.idem("-o", "json", "lookup", "-n", "jobs", "-k", "j1").must(t, 0, "lookup -o json")
	var look idemv1.LookupResponse
	parseJSON(t, r.stdout, &look)
	if look.GetRecord().GetToken() != rec.GetToken() || look.GetRecord().GetState() != idemv1.State_STATE_COMPLETED {
		t.Errorf("lookup -o json = %v", &look)
	}

	tok2 := f.claim("jobs", "j2")
	r = f.idem("-o", "json", "fail", "-n", "jobs", "-k", "j2", "--lease-token", tok2, "--error", "boom").must(t, 0, "fail -o json")
	var failed idemv1.FailResponse
	parseJSON(t, r.stdout, &failed)
	if failed.GetRecord().GetState() != idemv1.State_STATE_FAILED || failed.GetRecord().GetError() != "boom" {
		t.Errorf("fail -o json = %v", &failed)
	}
	r = f.idem("-o", "json", "claim", "-n", "jobs", "-k", "j2").must(t, int(exitFailed), "claim of a failed job -o json")
	var failedReplay idemv1.ClaimResponse
	parseJSON(t, r.stdout, &failedReplay)
	if failedReplay.GetOutcome() != idemv1.Outcome_OUTCOME_FAILED || failedReplay.GetRecord().GetError() != "boom" {
		t.Errorf("claim of a failed job -o json = %v", &failedReplay)
	}

	r = f.idem("-o", "json", "stats").must(t, 0, "stats -o json")
	var stats idemv1.StatsResponse
	parseJSON(t, r.stdout, &stats)
	want := "jobs STATE_COMPLETED 1,jobs STATE_FAILED 1,"
	var got string
	for _, row := range stats.GetRows() {
		got += row.GetNamespace() + " " + row.GetState().String() + " " + strconv.FormatInt(row.GetCount(), 10) + ","
	}
	if got != want {
		t.Errorf("stats -o json rows %q; want %q", got, want)
	}

	r = f.idem("-o", "json", "list").must(t, 0, "list -o json")
	var list idemv1.ListRecordsResponse
	parseJSON(t, r.stdout, &list)
	if len(list.GetRecords()) != 2 || list.GetRecords()[0].GetKey() != "j1" || list.GetRecords()[1].GetKey() != "j2" {
		t.Errorf("list -o json = %v; want j1 and j2", &list)
	}

	r = f.idem("-o", "json", "delete", "-n", "jobs", "-k", "j2").must(t, 0, "delete -o json")
	var deleted idemv1.DeleteRecordResponse
	parseJSON(t, r.stdout, &deleted)
	if deleted.GetRecord().GetKey() != "j2" || deleted.GetRecord().GetState() != idemv1.State_STATE_FAILED {
		t.Errorf("delete -o json = %v; want the FAILED record j2 as it was", &deleted)
	}
}

// TestResultsThroughFilesAndStdio moves bytes that are not text through
// --result-file -, --result-file FILE and --result-out - / FILE unchanged.
func TestResultsThroughFilesAndStdio(t *testing.T) {
	t.Parallel()
	f := setup(t)
	dir := t.TempDir()
	payload := []byte("line one\nNUL \x00 and bad UTF-8 \xff\xfe\ntrailing newline\n")

	tok := f.claim("res", "stdin")
	f.idemWith(runOpts{stdin: payload}, "complete", "-n", "res", "-k", "stdin", "--lease-token", tok, "--result-file", "-").must(t, 0, "complete --result-file -")
	r := f.idem("lookup", "-n", "res", "-k", "stdin", "--result-out", "-").must(t, 0, "lookup --result-out -")
	if r.stdout != string(payload) {
		t.Errorf("lookup --result-out - = %q; want %q", r.stdout, payload)
	}
	out := filepath.Join(dir, "lookup.out")
	r = f.idem("lookup", "-n", "res", "-k", "stdin", "--result-out", out).must(t, 0, "lookup --result-out FILE")
	if got, _ := os.ReadFile(out); !bytes.Equal(got, payload) {
		t.Errorf("lookup --result-out FILE wrote %q; want %q", got, payload)
	}
	if !strings.Contains(r.stdout, "state ") || !strings.Contains(r.stdout, "bytes (--result-out") {
		t.Errorf("lookup --result-out FILE should still print the table, with the result by its size:\n%s", r.stdout)
	}
	out = filepath.Join(dir, "claim.out")
	f.idem("claim", "-n", "res", "-k", "stdin", "--result-out", out).must(t, int(exitCompleted), "claim --result-out FILE")
	if got, _ := os.ReadFile(out); !bytes.Equal(got, payload) {
		t.Errorf("claim --result-out FILE wrote %q on replay; want %q", got, payload)
	}

	in := filepath.Join(dir, "result.in")
	if err := os.WriteFile(in, payload, 0o600); err != nil {
		t.Fatal(err)
	}
	tok = f.claim("res", "file")
	r = f.idem("complete", "-n", "res", "-k", "file", "--lease-token", tok, "--result-file", in, "--result-out", "-").must(t, 0, "complete --result-file FILE")
	if r.stdout != string(payload) {
		t.Errorf("complete --result-out - = %q; want the stored result %q", r.stdout, payload)
	}
	// A repeat with the same token and result returns what was stored;
	// another result is not a repeat.
	r = f.idem("complete", "-n", "res", "-k", "file", "--lease-token", tok, "--result-file", in, "--result-out", "-").must(t, 0, "complete repeated")
	if r.stdout != string(payload) {
		t.Errorf("a repeated complete printed %q; want the result stored first", r.stdout)
	}
	f.idem("complete", "-n", "res", "-k", "file", "--lease-token", tok, "--result", "other").must(t, int(exitAlreadyTerminal), "complete repeated with another result")

	r = f.idem("-o", "json", "lookup", "-n", "res", "-k", "file", "--result-out", "-").must(t, int(exitError), "-o json with --result-out -")
	oneLine(t, r.stderr)
	r = f.idem("complete", "-n", "res", "-k", "x", "--lease-token", "1", "--result-file", filepath.Join(dir, "missing")).must(t, int(exitError), "missing --result-file")
	if !strings.Contains(r.stderr, "--result-file") || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("stderr %q should name --result-file and say the file is missing", r.stderr)
	}
}

// TestFingerprintFlags: --fingerprint-of hashes a file or stdin with
// SHA-256, which --fingerprint in hex matches, and another payload is a
// mismatch.
func TestFingerprintFlags(t *testing.T) {
	t.Parallel()
	f := setup(t)
	payload := []byte(`{"order":"1042","amount_cents":1999}`)
	sum := sha256.Sum256(payload)
	file := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(file, payload, 0o600); err != nil {
		t.Fatal(err)
	}
	f.claim("fp", "k", "--fingerprint-of", file)
	r := f.idem("-o", "json", "lookup", "-n", "fp", "-k", "k").must(t, 0, "lookup")
	var look idemv1.LookupResponse
	parseJSON(t, r.stdout, &look)
	if !bytes.Equal(look.GetRecord().GetFingerprint(), sum[:]) {
		t.Errorf("stored fingerprint %x; want the SHA-256 of the file, %x", look.GetRecord().GetFingerprint(), sum)
	}
	f.idem("claim", "-n", "fp", "-k", "k", "--fingerprint", hex.EncodeToString(sum[:])).must(t, int(exitInProgress), "claim with the same fingerprint in hex")
	f.idemWith(runOpts{stdin: payload}, "claim", "-n", "fp", "-k", "k", "--fingerprint-of", "-").must(t, int(exitInProgress), "claim with the same payload on stdin")
	f.idemWith(runOpts{stdin: []byte("another payload")}, "claim", "-n", "fp", "-k", "k", "--fingerprint-of", "-").must(t, int(exitFingerprintMismatch), "claim with another payload")

	r = f.idem("claim", "-n", "fp", "-k", "k2", "--fingerprint", "xyz").must(t, int(exitError), "bad hex")
	if !strings.Contains(r.stderr, "--fingerprint \"xyz\" is not hex") {
		t.Errorf("stderr %q should say the fingerprint is not hex", r.stderr)
	}
	f.idem("claim", "-n", "fp", "-k", "k2", "--fingerprint", "aa", "--fingerprint-of", file).must(t, int(exitError), "both fingerprint flags")
}

// TestEnvTwins: the IDEM_* variables stand in for their flags.
func TestEnvTwins(t *testing.T) {
	t.Parallel()
	f := setup(t)
	env := []string{"IDEM_ADDR=" + f.srv.Addr}
	r := runIdem(t, runOpts{env: env}, "claim", "-n", "env", "-k", "k1").must(t, 0, "claim with IDEM_ADDR")
	token := strings.TrimSpace(r.stdout)
	r = runIdem(t, runOpts{env: append(env, "IDEM_LEASE_TOKEN="+token, "IDEM_OUTPUT=json", "IDEM_QUIET=1")},
		"complete", "-n", "env", "-k", "k1", "--result", "ok").must(t, 0, "complete with IDEM_LEASE_TOKEN")
	var done idemv1.CompleteResponse
	parseJSON(t, r.stdout, &done) // IDEM_OUTPUT=json
	if done.GetRecord().GetState() != idemv1.State_STATE_COMPLETED {
		t.Errorf("complete with IDEM_LEASE_TOKEN: %v", &done)
	}
	if r.stderr != "" {
		t.Errorf("IDEM_QUIET=1 left %q on stderr", r.stderr)
	}
	// A boolean variable set but empty is as if unset, not an error: the
	// message on stderr is back.
	r = runIdem(t, runOpts{env: env}, "claim", "-n", "env", "-k", "k-empty").must(t, 0, "claim")
	r = runIdem(t, runOpts{env: append(env, "IDEM_LEASE_TOKEN="+strings.TrimSpace(r.stdout), "IDEM_QUIET=", "IDEM_TLS=", "IDEM_INSECURE=")},
		"complete", "-n", "env", "-k", "k-empty", "--result", "ok").must(t, 0, "complete with IDEM_QUIET= (empty)")
	if r.stderr == "" {
		t.Error("IDEM_QUIET= (empty) left stderr empty; want it read as unset")
	}
	// A flag wins over its variable.
	runIdem(t, runOpts{env: []string{"IDEM_ADDR=" + closedAddr(t)}}, "--addr", f.srv.Addr, "lookup", "-n", "env", "-k", "k1").must(t, 0, "--addr over IDEM_ADDR")
	runIdem(t, runOpts{env: []string{"IDEM_ADDR=" + closedAddr(t)}}, "lookup", "-n", "env", "-k", "k1").must(t, int(exitUnavailable), "IDEM_ADDR to nowhere")
	runIdem(t, runOpts{env: []string{"IDEM_TIMEOUT=bogus"}}, "--addr", f.srv.Addr, "lookup", "-n", "env", "-k", "k1").must(t, int(exitError), "bad IDEM_TIMEOUT")

	// IDEM_TOKEN authenticates like --token.
	srv := tenantServer(t)
	runIdem(t, runOpts{env: []string{"IDEM_ADDR=" + srv.Addr, "IDEM_TOKEN=" + paymentsToken}}, "claim", "-n", "process_payment", "-k", "k1").must(t, 0, "claim with IDEM_TOKEN")
	runIdem(t, runOpts{env: []string{"IDEM_ADDR=" + srv.Addr, "IDEM_TOKEN=wrong"}}, "claim", "-n", "process_payment", "-k", "k1").must(t, int(exitDenied), "claim with a wrong IDEM_TOKEN")
}

// TestUsageErrorsAreOneLine: every mistake on the command line is one line
// on stderr that names it, nothing on stdout, and exit code 1, before any
// call is made.
func TestUsageErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t) // a call would exit 19, not 1
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"claim", "-n", "a", "-k", "b", "--bogus"}, `unknown flag --bogus; run "idem claim --help"`},
		{"no command", nil, `run "idem --help"`},
		{"unknown command", []string{"clam"}, `unexpected argument clam`},
		{"missing key", []string{"claim", "-n", "a"}, "claim needs a key: -k KEY for one job, the keys as arguments or --stdin for many"},
		{"missing lease token", []string{"complete", "-n", "a", "-k", "b"}, "--lease-token N is required: the token idem claim printed"},
		{"bad lease token", []string{"complete", "-n", "a", "-k", "b", "--lease-token", "x"}, `--lease-token: expected a valid 64 bit int but got "x"`},
		{"bad duration", []string{"claim", "-n", "a", "-k", "b", "--lease-ttl", "5 minutes"}, "--lease-ttl"},
		{"two results", []string{"complete", "-n", "a", "-k", "b", "--lease-token", "1", "--result", "x", "--result-file", "-"}, "--result and --result-file can't be used together"},
		{"bad state", []string{"list", "--state", "done"}, `--state "done" is not a state: pass processing, completed, failed, released, expired or unresolved`},
		{"bad output", []string{"-o", "yaml", "stats"}, `--output must be one of "table","json"`},
		{"plaintext off the machine", []string{"--addr", "idem.example.com:7070", "stats"}, "is not a loopback address, so plaintext would cross the network: pass --tls"},
		{"token in plaintext", []string{"--addr", "idem.example.com:7070", "--insecure", "--token", "s3cret", "stats"}, "refusing to send --token in plaintext to idem.example.com:7070"},
		{"insecure and tls", []string{"--insecure", "--tls", "stats"}, "--insecure and --tls (or a --tls-* flag) contradict each other"},
		{"cert without key", []string{"--tls-cert", "c.pem", "stats"}, "--tls-cert needs --tls-key"},
		{"zero timeout", []string{"--timeout", "0s", "stats"}, "--timeout is 0s; pass a duration above zero"},
		{"missing CA file", []string{"--tls-ca", "/nonexistent/ca.pem", "stats"}, "--tls-ca: open /nonexistent/ca.pem"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runIdem(t, runOpts{env: []string{"IDEM_ADDR=" + addr}}, tc.args...)
			r.must(t, int(exitError), strings.Join(tc.args, " "))
			oneLine(t, r.stderr)
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr %q does not say %q", r.stderr, tc.want)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q; want nothing", r.stdout)
			}
		})
	}
	// --insecure lets plaintext go to an address that is not loopback: the
	// call is made. 0.0.0.0 is not a loopback address to the CLI, yet Linux
	// delivers a connection to it on this machine, so the test sends nothing
	// off the machine and finds nobody on port 1.
	r := runIdem(t, runOpts{}, "--addr", "0.0.0.0:1", "--insecure", "--timeout", "300ms", "stats")
	r.must(t, int(exitUnavailable), "--insecure to a remote address")
	oneLine(t, r.stderr)
}

// TestTLS: --tls-ca, --tls-server-name and the mutual-TLS --tls-cert and
// --tls-key, and their env twins, against a server that serves TLS.
func TestTLS(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "idem test CA")
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := testcerts.WritePEM(t, dir, "client", ca.Client(t, pkix.Name{CommonName: "worker"}))
	start := func(clientAuth tls.ClientAuthType) *testserver.Server {
		cfg := &tls.Config{Certificates: []tls.Certificate{ca.Server(t)}, ClientCAs: ca.Pool(), ClientAuth: clientAuth, MinVersion: tls.VersionTLS12}
		clientCfg := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Client(t, pkix.Name{CommonName: "setup"})}, MinVersion: tls.VersionTLS12}
		return testserver.StartWith(t, testserver.Options{
			ServerOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))},
			ClientCreds:   credentials.NewTLS(clientCfg),
		})
	}
	// A NOT_FOUND answer (13) proves the call got through TLS to idemd.
	lookup := []string{"lookup", "-n", "tls", "-k", "k"}
	srv := start(tls.NoClientCert)
	runIdem(t, runOpts{}, append([]string{"--addr", srv.Addr, "--tls-ca", caFile}, lookup...)...).must(t, int(exitNotFound), "--tls-ca")
	runIdem(t, runOpts{env: []string{"IDEM_ADDR=" + srv.Addr, "IDEM_TLS_CA=" + caFile}}, lookup...).must(t, int(exitNotFound), "IDEM_TLS_CA")
	runIdem(t, runOpts{}, append([]string{"--addr", srv.Addr, "--tls-ca", caFile, "--tls-server-name", "localhost"}, lookup...)...).must(t, int(exitNotFound), "--tls-server-name localhost")
	r := runIdem(t, runOpts{}, append([]string{"--addr", srv.Addr, "--tls-ca", caFile, "--tls-server-name", "other.example"}, lookup...)...)
	r.must(t, int(exitUnavailable), "--tls-server-name that the certificate does not name")
	oneLine(t, r.stderr)
	runIdem(t, runOpts{}, append([]string{"--addr", srv.Addr, "--tls"}, lookup...)...).must(t, int(exitUnavailable), "--tls without the CA")
	r = runIdem(t, runOpts{}, append([]string{"--addr", srv.Addr}, lookup...)...).must(t, int(exitUnavailable), "plaintext to a TLS server")
	if !strings.Contains(r.stderr, "--tls matches") {
		t.Errorf("stderr %q should point at --tls", r.stderr)
	}

	mtls := start(tls.RequireAndVerifyClientCert)
	runIdem(t, runOpts{}, append([]string{"--addr", mtls.Addr, "--tls-ca", caFile, "--tls-cert", certFile, "--tls-key", keyFile}, lookup...)...).must(t, int(exitNotFound), "mutual TLS")
	runIdem(t, runOpts{env: []string{"IDEM_ADDR=" + mtls.Addr, "IDEM_TLS_CA=" + caFile, "IDEM_TLS_CERT=" + certFile, "IDEM_TLS_KEY=" + keyFile}}, lookup...).must(t, int(exitNotFound), "mutual TLS from the environment")
	r = runIdem(t, runOpts{}, append([]string{"--addr", mtls.Addr, "--tls-ca", caFile}, lookup...)...)
	r.must(t, int(exitUnavailable), "no client certificate for a server that requires one")
	oneLine(t, r.stderr)
	r = runIdem(t, runOpts{}, append([]string{"--addr", mtls.Addr, "--tls-cert", certFile, "--tls-key", caFile}, lookup...)...).must(t, int(exitError), "a key that is not a key")
	oneLine(t, r.stderr)
}

// TestHeartbeatFailRetry: heartbeat extends the lease; a retryable fail
// hands the job back to the next claim, which gets a greater token.
func TestHeartbeatFailRetry(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tok := f.claim("hb", "k", "--lease-ttl", "5s")
	r := f.idem("heartbeat", "-n", "hb", "-k", "k", "--lease-token", tok, "--lease-ttl", "1h").must(t, 0, "heartbeat")
	if r.stdout != "" || !strings.Contains(r.stderr, "extended the lease of hb/k (token "+tok+") to ") {
		t.Errorf("heartbeat: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	r = f.idem("-o", "json", "lookup", "-n", "hb", "-k", "k").must(t, 0, "lookup")
	var look idemv1.LookupResponse
	parseJSON(t, r.stdout, &look)
	if left := time.Until(look.GetRecord().GetLeaseExpiresAt().AsTime()); left < 50*time.Minute {
		t.Errorf("the lease runs out in %s after heartbeat --lease-ttl 1h", left)
	}

	r = f.idem("fail", "-n", "hb", "-k", "k", "--fencing-token", tok, "--error", "smtp timeout", "--retryable").must(t, 0, "fail --retryable")
	if !strings.Contains(r.stderr, "released hb/k") {
		t.Errorf("fail --retryable stderr %q; want it to say the job was released", r.stderr)
	}
	r = f.idem("claim", "-n", "hb", "-k", "k").must(t, 0, "claim after a retryable fail")
	newTok, _ := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
	oldTok, _ := strconv.ParseInt(tok, 10, 64)
	if newTok <= oldTok || !strings.Contains(r.stderr, "(attempt 2; an earlier attempt may have done part of the work)") {
		t.Errorf("claim after release: token %d (was %d), stderr %q", newTok, oldTok, r.stderr)
	}
	// The old token lost the lease.
	f.idem("heartbeat", "-n", "hb", "-k", "k", "--lease-token", tok).must(t, int(exitLeaseLost), "heartbeat with the old token")

	r = f.idem("fail", "-n", "hb", "-k", "k", "--lease-token", strconv.FormatInt(newTok, 10), "--error", "card declined").must(t, 0, "permanent fail")
	if !strings.Contains(r.stderr, "failed hb/k for good") {
		t.Errorf("permanent fail stderr %q", r.stderr)
	}
	r = f.idem("claim", "-n", "hb", "-k", "k").must(t, int(exitFailed), "claim after a permanent fail")
	if !strings.Contains(r.stderr, "its stored error: card declined") {
		t.Errorf("claim of a failed job: stderr %q should replay the error", r.stderr)
	}
}

// TestListDeleteStats: the AdminService commands in table mode, list's
// filters and paging.
func TestListDeleteStats(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := 1; i <= 5; i++ {
		f.claim("alpha", "k"+strconv.Itoa(i))
	}
	f.claim("beta", "b1")
	tok := f.claim("beta", "b2")
	f.idem("complete", "-n", "beta", "-k", "b2", "--lease-token", tok).must(t, 0, "complete")

	r := f.idem("list").must(t, 0, "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 8 || !strings.HasPrefix(lines[0], "NAMESPACE  KEY  STATE") || !strings.HasPrefix(lines[1], "alpha      k1   PROCESSING") {
		t.Errorf("list table:\n%s", r.stdout)
	}

	r = f.idem("list", "--page-size", "2").must(t, 0, "list --page-size 2")
	if n := strings.Count(r.stdout, "\n"); n != 3 {
		t.Errorf("list --page-size 2 printed %d lines; want a header and 2 rows:\n%s", n, r.stdout)
	}
	m := regexp.MustCompile(`--page-token (\S+) for the next page`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("list --page-size 2 stderr %q should give the next page token", r.stderr)
	}
	r = f.idem("list", "--page-size", "2", "--page-token", m[1]).must(t, 0, "list --page-token")
	if !strings.Contains(r.stdout, "alpha      k3") {
		t.Errorf("the second page should start at alpha/k3:\n%s", r.stdout)
	}

	r = f.idem("-o", "json", "list", "--page-size", "2", "--all").must(t, 0, "list --all")
	var all idemv1.ListRecordsResponse
	parseJSON(t, r.stdout, &all)
	if len(all.GetRecords()) != 7 || all.GetNextPageToken() != "" {
		t.Errorf("list --all --page-size 2 gave %d records (next %q); want all 7 and no next page", len(all.GetRecords()), all.GetNextPageToken())
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-n", "beta"}, 2},
		{[]string{"--state", "completed"}, 1},
		{[]string{"--state", "PROCESSING", "-n", "alpha"}, 5},
		{[]string{"--older-than", "1h"}, 0},
		{[]string{"--key-prefix", "k"}, 5},
		{[]string{"--key-prefix", "b", "-n", "beta"}, 2},
		{[]string{"--key-prefix", "b1"}, 1},
	} {
		r := f.idem(append([]string{"-o", "json", "list", "--all"}, tc.args...)...).must(t, 0, "list "+strings.Join(tc.args, " "))
		var page idemv1.ListRecordsResponse
		parseJSON(t, r.stdout, &page)
		if len(page.GetRecords()) != tc.want {
			t.Errorf("list %v: %d records; want %d", tc.args, len(page.GetRecords()), tc.want)
		}
	}

	r = f.idem("stats").must(t, 0, "stats")
	rows := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	slices.Sort(rows[1:]) // the order of states within a namespace is idemd's
	want := "NAMESPACE  STATE       COUNT\nalpha      PROCESSING  5\nbeta       COMPLETED   1\nbeta       PROCESSING  1"
	if got := strings.Join(rows, "\n"); got != want {
		t.Errorf("stats:\n%s\nwant:\n%s", got, want)
	}
	r = f.idem("stats", "-n", "beta").must(t, 0, "stats -n beta")
	if strings.Contains(r.stdout, "alpha") {
		t.Errorf("stats -n beta shows alpha:\n%s", r.stdout)
	}

	r = f.idem("delete", "-n", "beta", "-k", "b2").must(t, 0, "delete")
	if !strings.Contains(r.stderr, "deleted beta/b2; it was COMPLETED with token "+tok) {
		t.Errorf("delete stderr %q", r.stderr)
	}
	r = f.idem("lookup", "-n", "beta", "-k", "b2").must(t, int(exitNotFound), "lookup after delete")
	if !strings.Contains(r.stderr, "or deleted") {
		t.Errorf("lookup after delete: stderr %q; want the reasons to include a delete", r.stderr)
	}
	f.idem("delete", "-n", "beta", "-k", "b2").must(t, int(exitNotFound), "delete again")
	// The key starts afresh with a greater token.
	r = f.idem("claim", "-n", "beta", "-k", "b2").must(t, 0, "claim after delete")
	if n, _ := strconv.Atoi(strings.TrimSpace(r.stdout)); strconv.Itoa(n) == tok || !strings.Contains(r.stderr, "(attempt 1)") {
		t.Errorf("claim after delete: stdout %q, stderr %q; want attempt 1 with a new token", r.stdout, r.stderr)
	}
}

// TestHelp: every command has --help with an example, and idem --help has
// the exit codes.
func TestHelp(t *testing.T) {
	t.Parallel()
	r := runIdem(t, runOpts{}, "--help").must(t, 0, "idem --help")
	for _, want := range []string{"Usage: idem <command>", "Exit codes:", "protobuf JSON", "--insecure", "IDEM_ADDR"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("idem --help lacks %q", want)
		}
	}
	for _, cmd := range []string{"claim", "complete", "fail", "heartbeat", "lookup", "list", "delete", "stats"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			r := runIdem(t, runOpts{}, cmd, "--help").must(t, 0, cmd+" --help")
			for _, want := range []string{"Usage: idem " + cmd, "Example:\n\n    ", "idem " + cmd + " ", "Global flags (every command):"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("idem %s --help lacks %q:\n%s", cmd, want, r.stdout)
				}
			}
		})
	}
}

// TestClaimWait: claim --wait waits for the holder and exits with its outcome;
// without a change it exits IN_PROGRESS once the wait is over, even past
// --timeout.
func TestClaimWait(t *testing.T) {
	t.Parallel()
	f := setup(t)
	token := f.claim("jobs", "order-w", "--lease-ttl", "5m")

	start := time.Now()
	f.idem("--timeout", "2s", "claim", "-n", "jobs", "-k", "order-w", "--wait", "3s").must(t, int(exitInProgress), "claim --wait with the holder still at work")
	if took := time.Since(start); took < 3*time.Second {
		t.Errorf("claim --wait 3s answered after %s", took)
	}

	done := make(chan result, 1)
	go func() { done <- f.idem("claim", "-n", "jobs", "-k", "order-w", "--wait", "30s", "--result-out", "-") }()
	time.Sleep(300 * time.Millisecond)
	f.idem("complete", "-n", "jobs", "-k", "order-w", "--lease-token", token, "--result", "ok").must(t, 0, "complete")
	select {
	case r := <-done:
		r.must(t, int(exitCompleted), "claim --wait")
		if r.stdout != "ok" {
			t.Errorf("claim --wait --result-out - printed %q; want the result ok", r.stdout)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("claim --wait was not answered after the Complete")
	}
	f.idem("claim", "-n", "jobs", "-k", "order-x", "--wait", "61s").must(t, int(exitInvalidArgument), "claim --wait 61s")
}

// TestHelpOfEachCommand: a command's --help lists every exit code that
// exit.go's table gives to that command ("claim: …"); the global flags show
// their defaults; and a required choice of flags reads as a choice in the
// usage line, not as flags that are all required.
func TestHelpOfEachCommand(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"claim", "resolve"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			help := runIdem(t, runOpts{}, cmd, "--help").must(t, 0, cmd+" --help").stdout
			for _, e := range exitCodes {
				if !strings.HasPrefix(e.meaning, cmd+":") {
					continue
				}
				if !regexp.MustCompile(`(?m)^\s+` + strconv.Itoa(int(e.code)) + `\s`).MatchString(help) {
					t.Errorf("idem %s --help does not list exit code %d (%s)", cmd, e.code, e.name)
				}
			}
			if want := "(dns:///host:port, unix:///path); 127.0.0.1:7070\n"; !strings.Contains(help, want) {
				t.Errorf("idem %s --help does not give --addr's default, 127.0.0.1:7070:\n%s", cmd, help)
			}
		})
	}
	usage, _, _ := strings.Cut(runIdem(t, runOpts{}, "resolve", "--help").must(t, 0, "resolve --help").stdout, "\n")
	if want := "Usage: idem resolve --namespace=NS --key=KEY (--completed | --failed | --release) [flags]"; usage != want {
		t.Errorf("idem resolve --help's usage line is\n  %s\nwant\n  %s", usage, want)
	}
	// Without one of them, the error names the choice.
	r := runIdem(t, runOpts{}, "resolve", "-n", "ns", "-k", "k")
	if r.code != int(exitError) || !strings.Contains(r.stderr, "--completed") || !strings.Contains(r.stderr, "--release") {
		t.Errorf("resolve without --completed, --failed or --release: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestLookupPrintsSteps: lookup shows a job's steps under its record, one
// row each in the order they were first recorded, with the state, the
// token that wrote it, its times and its result; a record without steps
// shows none, and -o json has them whole.
func TestLookupPrintsSteps(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	token, err := strconv.ParseInt(f.claim("jobs", "two-effects"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	c := f.srv.Client
	if _, err := c.CompleteStep(ctx, &idemv1.CompleteStepRequest{Namespace: "jobs", Key: "two-effects", Token: token, Step: "charge", Result: []byte("ch_1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteStep(ctx, &idemv1.CompleteStepRequest{Namespace: "jobs", Key: "two-effects", Token: token, Step: "audit", Result: bytes.Repeat([]byte{0xff}, 200)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartStep(ctx, &idemv1.StartStepRequest{Namespace: "jobs", Key: "two-effects", Token: token, Step: "receipt"}); err != nil {
		t.Fatal(err)
	}

	r := f.idem("lookup", "-n", "jobs", "-k", "two-effects").must(t, 0, "lookup")
	tail := r.stdout[strings.Index(r.stdout, "\nSTEP"):]
	lines := strings.Split(strings.TrimSpace(tail), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "STEP STATE TOKEN STARTED FINISHED RESULT" {
		t.Fatalf("lookup's steps:\n%s\nwant a header and three rows under a blank line", tail)
	}
	ts := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`
	tok := strconv.FormatInt(token, 10)
	for i, want := range []string{
		`^charge +FINISHED +` + tok + ` +` + ts + ` +` + ts + ` +"ch_1"$`,
		`^audit +FINISHED +` + tok + ` +` + ts + ` +` + ts + ` +200 bytes \(-o json for the bytes\)$`,
		`^receipt +STARTED +` + tok + ` +` + ts + ` +- +-$`,
	} {
		if !regexp.MustCompile(want).MatchString(lines[i+1]) {
			t.Errorf("step row %d %q; want it to match %s", i+1, lines[i+1], want)
		}
	}

	var look idemv1.LookupResponse
	r = f.idem("-o", "json", "lookup", "-n", "jobs", "-k", "two-effects").must(t, 0, "lookup -o json")
	if err := protojson.Unmarshal([]byte(r.stdout), &look); err != nil || len(look.GetRecord().GetSteps()) != 3 ||
		len(look.GetRecord().GetSteps()[1].GetResult()) != 200 {
		t.Fatalf("lookup -o json: %v, %v; want the three steps whole", &look, err)
	}

	f.claim("jobs", "one-effect")
	if r := f.idem("lookup", "-n", "jobs", "-k", "one-effect").must(t, 0, "lookup"); strings.Contains(r.stdout, "STEP") {
		t.Errorf("lookup of a record without steps shows a steps table:\n%s", r.stdout)
	}
}
