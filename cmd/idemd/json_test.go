package main

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/config"
	"github.com/idemhq/idem/internal/testcerts"
)

// TestJSONListenIsProtected: the JSON listener follows the gRPC listener's
// rule: no address off this machine without authentication.
func TestJSONListenIsProtected(t *testing.T) {
	t.Parallel()
	out, code := run(t, nil, "serve", "--database-url", "postgres://postgres@127.0.0.1:1/x?connect_timeout=1", "--json-listen", "0.0.0.0:7072")
	if code == 0 || !strings.Contains(out, "--json-listen") || !strings.Contains(out, "pass --config") {
		t.Fatalf("exit %d, output %q; want a refusal naming --json-listen", code, out)
	}
}

// TestJSONListenerWithMutualTLS: with --tls-cert and --client-ca the JSON
// listener serves HTTPS, requires a client certificate, and the certificate
// names the tenant, as on the gRPC listener.
func TestJSONListenerWithMutualTLS(t *testing.T) {
	t.Parallel()
	token, err := config.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	ca := testcerts.NewCA(t, "idemd JSON test CA")
	dir := t.TempDir()
	certFile, keyFile := testcerts.WritePEM(t, dir, "server", ca.Server(t))
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, `tenants:
  - name: payments
    client_cert_subjects: ["CN=payments-worker"]
    namespaces: ["process_payment"]
  - name: billing
    tokens: ["`+config.HashToken(token)+`"]
`)
	jsonAddr := startIdemd(t, "--config", cfg, "--tls-cert", certFile, "--tls-key", keyFile, "--client-ca", caFile, "--json-listen", "127.0.0.1:0").JSONListen

	httpsClient := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: certs, MinVersion: tls.VersionTLS12},
		}}
	}
	claim := func(c *http.Client, key, bearer string) (int, map[string]any, error) {
		req, _ := http.NewRequest(http.MethodPost, "https://"+jsonAddr+"/v1/namespaces/process_payment/records/"+key+":claim", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		return resp.StatusCode, body, nil
	}

	worker := httpsClient(ca.Client(t, pkix.Name{CommonName: "payments-worker"}))
	if code, body, err := claim(worker, "order-1", ""); err != nil || code != http.StatusOK || body["outcome"] != "OUTCOME_ACQUIRED" {
		t.Fatalf("Claim with the tenant's certificate: %d %v %v; want 200 ACQUIRED", code, body, err)
	}
	// A token of another tenant next to the certificate is refused.
	if code, body, err := claim(worker, "order-2", token); err != nil || code != http.StatusUnauthorized {
		t.Fatalf("Claim with a certificate and another tenant's token: %d %v %v; want 401", code, body, err)
	}
	// Without a client certificate the handshake fails, token or not.
	if code, _, err := claim(httpsClient(), "order-3", token); err == nil {
		t.Fatalf("Claim without a client certificate answered %d; want a refused handshake", code)
	}
}
