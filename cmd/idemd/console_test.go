package main

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/console"
	"github.com/idemhq/idem/internal/testsupport/testcerts"
)

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	c := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// consoleLine is the log line that tells how to open the console, and
// consoleURL the console_url of the serving line ("" when the console is
// off). The serving line is there once startServe returns; the console's
// line follows it, so consoleLine waits for it.
func consoleLine(t *testing.T, p *idemdProc) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, line := range strings.Split(p.log(), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) == nil {
				if msg, _ := m["msg"].(string); strings.HasPrefix(msg, "operator console") {
					return m
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no operator console line in the log:\n%s", p.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func consoleURL(t *testing.T, p *idemdProc) string {
	t.Helper()
	for _, line := range strings.Split(p.log(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "idemd serving" {
			u, ok := m["console_url"].(string)
			if !ok {
				t.Fatalf("the serving line has no console_url: %s", line)
			}
			return u
		}
	}
	t.Fatalf("no serving line in the log:\n%s", p.log())
	return ""
}

// TestConsoleIsServedOnTheJSONListener: by default idemd serves the console
// at /console/ on --json-listen, next to the API, with its security
// headers, and logs its URL; /console and / redirect there.
func TestConsoleIsServedOnTheJSONListener(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir(), "--json-listen", "127.0.0.1:0")
	base := "http://" + p.jsonAddr
	if got := consoleURL(t, p); got != base+"/console/" {
		t.Fatalf("serving line console_url=%q; want %s/console/\n%s", got, base, p.log())
	}
	line := consoleLine(t, p)
	if line["url"] != base+"/console/" {
		t.Fatalf("console log line %v; want url=%s/console/", line, base)
	}
	if msg, _ := line["msg"].(string); !strings.Contains(msg, "anyone who reaches the port") {
		t.Errorf("console log line without a config: %q; want it to say anyone who reaches the port can act", msg)
	}

	resp, body := get(t, base+"/console/")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, `src="app.js"`) {
		t.Fatalf("GET /console/: %d %s %.200q; want the console's index.html", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if got := resp.Header.Get("Content-Security-Policy"); got != console.SecurityHeaders["Content-Security-Policy"] {
		t.Errorf("Content-Security-Policy %q; want %q", got, console.SecurityHeaders["Content-Security-Policy"])
	}
	resp, body = get(t, base+"/console/server.json")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"authentication":"none"`) {
		t.Errorf("GET /console/server.json without a config: %d %s; want authentication none", resp.StatusCode, body)
	}
	resp, _ = get(t, base+"/console")
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/console/" {
		t.Errorf("GET /console: %d Location %q; want a redirect to /console/", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The listener's root, where a browser pointed at it lands, leads there.
	resp, _ = get(t, base+"/")
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/console/" {
		t.Errorf("GET /: %d Location %q; want a redirect to /console/", resp.StatusCode, resp.Header.Get("Location"))
	}

	// The API answers on the same listener, REST routes included.
	apiResp, err := http.Post(base+"/idem.v1.AdminService/Stats", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	apiResp.Body.Close()
	if apiResp.StatusCode != http.StatusOK {
		t.Errorf("Stats beside the console: %d; want 200", apiResp.StatusCode)
	}
	rest, err := http.Post(base+"/v1/namespaces/mail/records/a%2F..%2F%2Fb:claim", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	restBody, _ := io.ReadAll(rest.Body)
	rest.Body.Close()
	if rest.StatusCode != http.StatusOK || !strings.Contains(string(restBody), `"key":"a/..//b"`) {
		t.Errorf("a REST Claim of the key a/..//b beside the console: %d %s; want 200 and the key as sent", rest.StatusCode, restBody)
	}
}

// TestConsoleTurnsOff: --console=false, --no-console and IDEM_CONSOLE=false
// each leave /console/ and / to the API (which knows no such route and says
// which it knows) and log no console URL, and the API still answers.
func TestConsoleTurnsOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"--console=false", nil, []string{"--console=false"}},
		{"--no-console", nil, []string{"--no-console"}},
		{"IDEM_CONSOLE=false", []string{"IDEM_CONSOLE=false"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startServeEnv(t, t.TempDir(), tc.env, append([]string{"--json-listen", "127.0.0.1:0"}, tc.args...)...)
			if got := consoleURL(t, p); got != "" {
				t.Errorf("serving line console_url=%q; want none", got)
			}
			base := "http://" + p.jsonAddr
			for _, path := range []string{"/", "/console/", "/console/app.js", "/console/server.json"} {
				resp, body := get(t, base+path)
				if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Security-Policy") != "" || !strings.Contains(body, "the REST routes are") {
					t.Errorf("GET %s: %d (CSP %q) %.100q; want the API's 404 listing its routes", path, resp.StatusCode, resp.Header.Get("Content-Security-Policy"), body)
				}
			}
			apiResp, err := http.Post(base+"/idem.v1.AdminService/Stats", "application/json", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			apiResp.Body.Close()
			if apiResp.StatusCode != http.StatusOK {
				t.Errorf("Stats: %d; want 200", apiResp.StatusCode)
			}
		})
	}
}

// TestConsoleSaysWhenAConfigAuthenticates: with tenants, server.json says
// authentication is required, and the log says to sign in.
func TestConsoleSaysWhenAConfigAuthenticates(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, "tenants:\n  - name: ops\n    operator: true\n    tokens: [\"sha256:"+strings.Repeat("ab", 32)+"\"]\n")
	p := startServe(t, t.TempDir(), "--json-listen", "127.0.0.1:0", "--config", cfg)
	if line := consoleLine(t, p); !strings.Contains(line["msg"].(string), "sign in with the token") {
		t.Errorf("console log line %v; want it to say to sign in", line)
	}
	_, body := get(t, "http://"+p.jsonAddr+"/console/server.json")
	if !strings.Contains(body, `"authentication":"required"`) {
		t.Errorf("server.json with tenants: %s; want authentication required", body)
	}
}

// TestConsoleOverTLS: with --tls-cert the console's URL is https, and the
// console is served over TLS beside the API.
func TestConsoleOverTLS(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "idemd console test CA")
	dir := t.TempDir()
	certFile, keyFile := testcerts.WritePEM(t, dir, "server", ca.Server(t))
	p := startServe(t, dir, "--json-listen", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile)
	want := "https://" + p.jsonAddr + "/console/"
	if got := consoleURL(t, p); got != want {
		t.Fatalf("serving line console_url=%q; want %s", got, want)
	}
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	resp, err := c.Get(want)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Security-Policy") == "" {
		t.Fatalf("GET %s: %d, CSP %q; want 200 with the policy", want, resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
	}
}
