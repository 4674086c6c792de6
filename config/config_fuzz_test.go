package config_test

import (
	"bytes"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/idemhq/idem/config"
)

// FuzzParse: Parse never panics; its errors are one line; a configuration
// it accepts validates again, and written back as YAML it parses to the
// same configuration. `go test` replays testdata/fuzz/FuzzParse; `go test
// -fuzz FuzzParse ./config` searches for more.
func FuzzParse(f *testing.F) {
	f.Add([]byte(readmeExample()))
	f.Add([]byte("tenants:\n  - name: a\n    tokens: [\"" + hashA + "\"]\n"))
	f.Add([]byte("tenants: []\n"))
	f.Add([]byte("tenants:\n  - name: a\n    client_cert_subjects: [\"CN=a\"]\n    namespaces: [\"x*\", \"[a-c]?\"]\n    rate_limit: {per_second: 0.5, burst: 1}\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse(data)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is more than one line: %q", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted, then Validate: %v", err)
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal an accepted config: %v", err)
		}
		again, err := config.Parse(out)
		if err != nil {
			t.Fatalf("an accepted config written back does not parse: %v\n%s", err, out)
		}
		out2, err := yaml.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the config:\n%s\n---\n%s", out, out2)
		}
	})
}
