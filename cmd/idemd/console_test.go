package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/console"
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

// consoleLine is the log line that gives the console's address, nil when
// there is none.
func consoleLine(p *idemdProc) map[string]any {
	for _, line := range strings.Split(p.log(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			if msg, _ := m["msg"].(string); strings.HasPrefix(msg, "operator console") {
				return m
			}
		}
	}
	return nil
}

// TestConsoleIsServedOnTheJSONListener: by default idemd serves the console
// at /console/ on --json-listen, next to the API, with its security
// headers, and logs its URL; /console redirects there.
func TestConsoleIsServedOnTheJSONListener(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir(), "--json-listen", "127.0.0.1:0")
	base := "http://" + p.jsonAddr
	line := consoleLine(p)
	if line == nil || line["url"] != base+"/console/" {
		t.Fatalf("console log line %v; want url=%s/console/\n%s", line, base, p.log())
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
// each leave /console/ to the API (which knows no such route) and log no
// console URL, and the API still answers.
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
			if line := consoleLine(p); line != nil {
				t.Errorf("console log line %v; want none", line)
			}
			base := "http://" + p.jsonAddr
			for _, path := range []string{"/console/", "/console/app.js", "/console/server.json"} {
				resp, body := get(t, base+path)
				if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Security-Policy") != "" {
					t.Errorf("GET %s: %d (CSP %q) %.100q; want the API's 404", path, resp.StatusCode, resp.Header.Get("Content-Security-Policy"), body)
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
	if line := consoleLine(p); line == nil || !strings.Contains(line["msg"].(string), "sign in with the token") {
		t.Errorf("console log line %v; want it to say to sign in", line)
	}
	_, body := get(t, "http://"+p.jsonAddr+"/console/server.json")
	if !strings.Contains(body, `"authentication":"required"`) {
		t.Errorf("server.json with tenants: %s; want authentication required", body)
	}
}
