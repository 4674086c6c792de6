package deploy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// unitFile is a systemd unit: each section's keys with their values, in
// order.
type unitFile map[string]map[string][]string

func readUnit(t *testing.T) unitFile {
	t.Helper()
	data, err := os.ReadFile("systemd/idemd.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := unitFile{}
	var section string
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			unit[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("idemd.service:%d: %q is neither a [Section] nor Key=value in one", n+1, line)
			}
			unit[section][k] = append(unit[section][k], v)
		}
	}
	return unit
}

// splitQuoted splits a systemd value list on white space, where a "…" or
// '…' word may hold spaces (systemd.syntax(7)).
func splitQuoted(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var b strings.Builder
	var quote rune
	inWord := false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			b.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, b.String())
				b.Reset()
				inWord = false
			}
		default:
			b.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("unbalanced quote in %q", s)
	}
	if inWord {
		words = append(words, b.String())
	}
	return words
}

// unitEnvironment is the environment the unit's Environment= lines give
// idemd, with the specifier %d (the credentials directory) expanded to
// credentials.
func unitEnvironment(t *testing.T, unit unitFile, credentials string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, line := range unit["Service"]["Environment"] {
		for _, kv := range splitQuoted(t, line) {
			name, value, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("Environment=%s: %q is not NAME=value", line, kv)
			}
			var b strings.Builder
			for i := 0; i < len(value); i++ {
				if value[i] != '%' {
					b.WriteByte(value[i])
					continue
				}
				if i+1 == len(value) {
					t.Fatalf("Environment=%s: a %% at the end", line)
				}
				i++
				switch value[i] {
				case 'd':
					b.WriteString(credentials)
				case '%':
					b.WriteByte('%')
				default:
					t.Fatalf("Environment=%s: the test knows the specifiers %%d and %%%%, not %%%c", line, value[i])
				}
			}
			env[name] = b.String()
		}
	}
	return env
}

// TestSystemdUnit checks the unit against idemd: ExecStart runs `idemd
// serve` with no flag (a flag would beat the variable idemd.env sets), the
// unit's defaults are variables idemd reads, and it runs as a user of its
// own with the config file as a credential.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	unit := readUnit(t)
	for _, s := range []string{"Unit", "Service", "Install"} {
		if unit[s] == nil {
			t.Errorf("idemd.service has no [%s] section", s)
		}
	}
	svc := unit["Service"]
	if len(svc["ExecStart"]) != 1 {
		t.Fatalf("idemd.service has %d ExecStart lines, want 1", len(svc["ExecStart"]))
	}
	fields := splitQuoted(t, svc["ExecStart"][0])
	if !filepath.IsAbs(fields[0]) || filepath.Base(fields[0]) != "idemd" {
		t.Errorf("ExecStart runs %s, want idemd by its absolute path", fields[0])
	}
	checkServeArgs(t, "idemd.service ExecStart", fields[1:])
	if len(fields) != 2 {
		t.Errorf("ExecStart is %q: a flag there beats the variable of the same setting, so a line of idemd.env for it would do nothing; set it with Environment= instead", svc["ExecStart"][0])
	}
	env := unitEnvironment(t, unit, "/run/credentials/idemd.service")
	for name, value := range env {
		checkEnv(t, "idemd.service Environment", name)
		if strings.HasSuffix(name, "_LISTEN") {
			port(t, "idemd.service "+name, value)
		}
	}
	for _, name := range []string{"IDEM_LISTEN", "IDEM_HTTP_LISTEN", "IDEM_JSON_LISTEN", "IDEM_CONFIG", "IDEM_DATA_DIR", "IDEM_LOG_FORMAT"} {
		if env[name] == "" {
			t.Errorf("idemd.service sets no %s", name)
		}
	}
	var credential string
	for _, lc := range svc["LoadCredential"] {
		if name, _, ok := strings.Cut(lc, ":"); ok {
			credential = name
		}
	}
	if credential == "" || env["IDEM_CONFIG"] != "/run/credentials/idemd.service/"+credential {
		t.Errorf("IDEM_CONFIG is %q; the unit loads the config file as the credential %q, so it is %%d/%s", env["IDEM_CONFIG"], credential, credential)
	}
	if !slices.Contains(svc["EnvironmentFile"], "-/etc/idem/idemd.env") {
		t.Errorf("idemd.service reads no EnvironmentFile=-/etc/idem/idemd.env: %q", svc["EnvironmentFile"])
	}
	if svc["User"] == nil && (len(svc["DynamicUser"]) == 0 || svc["DynamicUser"][0] != "yes") {
		t.Error("idemd.service runs idemd as root: set User= or DynamicUser=yes")
	}
}

// TestSystemdAnalyzeVerify runs systemd's own check of the unit, with
// ExecStart pointing at the release's idemd (verify wants the binary to
// exist). Any complaint fails it, warnings included. Without systemd-analyze
// (apt-get install systemd) it says so, and in CI (CI=true) fails.
func TestSystemdAnalyzeVerify(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is not installed (apt-get install systemd); CI runs it on deploy/systemd/idemd.service")
		}
		t.Skip("NOTICE: systemd-analyze is not installed (apt-get install systemd), so the unit was not verified by systemd")
	}
	needRelease(t)
	data, err := os.ReadFile("systemd/idemd.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := strings.ReplaceAll(string(data), "/usr/local/bin/idemd", release.idemd)
	path := filepath.Join(t.TempDir(), "idemd.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify idemd.service: %v\n%s", err, out)
	}
}

// TestSystemdEnvFileTakesEffect starts ExecStart's command in the
// environment systemd gives it: the unit's Environment= defaults, then
// /etc/idem/idemd.env, whose lines win (systemd.exec(5): "Settings from
// these files override settings made with Environment="), and
// CREDENTIALS_DIRECTORY. Each of the six settings the unit makes is
// replaced by the env file, and idemd serves as the file says: on its
// addresses, with its log format and data directory, and with the unit's
// config file, which the file leaves alone.
func TestSystemdEnvFileTakesEffect(t *testing.T) {
	t.Parallel()
	needRelease(t)
	unit := readUnit(t)
	dir := t.TempDir()
	credentials := filepath.Join(dir, "credentials")
	if err := os.Mkdir(credentials, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(release.idemd, "token", "new", "--tenant", "deploy", "-o", "json").Output()
	var tok struct{ Hash string }
	if err != nil || json.Unmarshal(out, &tok) != nil || tok.Hash == "" {
		t.Fatalf("idemd token new -o json: %v\n%s", err, out)
	}
	config := fmt.Sprintf("tenants:\n  - name: deploy\n    tokens: [%q]\n", tok.Hash)
	if err := os.WriteFile(filepath.Join(credentials, "config.yaml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}

	// The operator's idemd.env: other addresses, text logs, another data
	// directory (the SQLite store, so the test needs no database).
	dataDir := filepath.Join(dir, "data")
	envFile := map[string]string{
		"IDEM_LISTEN":      "127.0.0.1:0",
		"IDEM_HTTP_LISTEN": "127.0.0.1:0",
		"IDEM_JSON_LISTEN": "127.0.0.1:0",
		"IDEM_LOG_FORMAT":  "text",
		"IDEM_DATA_DIR":    dataDir,
	}
	unitEnv := unitEnvironment(t, unit, credentials)
	merged := map[string]string{"CREDENTIALS_DIRECTORY": credentials}
	for name, value := range unitEnv {
		merged[name] = value
	}
	for name, value := range envFile {
		merged[name] = value
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") {
			env = append(env, kv)
		}
	}
	for name, value := range merged {
		env = append(env, name+"="+value)
	}

	// systemd expands ${NAME} in ExecStart's arguments from the same
	// environment.
	args := splitQuoted(t, unit["Service"]["ExecStart"][0])
	for i := range args {
		args[i] = os.Expand(args[i], func(name string) string { return merged[name] })
	}
	cmd := exec.Command(release.idemd, args[1:]...)
	cmd.Env, cmd.Dir = env, dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		for range lines {
		}
		_ = cmd.Wait()
	})

	var logged []string
	var serving, loaded map[string]string
	timeout := time.After(60 * time.Second)
	for serving == nil {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("idemd exited before serving:\n%s", strings.Join(logged, "\n"))
			}
			logged = append(logged, line)
			if strings.HasPrefix(line, "{") {
				t.Fatalf("idemd logs JSON, the unit's default; idemd.env set IDEM_LOG_FORMAT=text:\n%s", line)
			}
			switch fields := textLogFields(line); fields["msg"] {
			case "config loaded":
				loaded = fields
			case "idemd serving":
				serving = fields
			}
		case <-timeout:
			t.Fatalf("idemd did not serve within 60s:\n%s", strings.Join(logged, "\n"))
		}
	}
	for _, key := range []string{"listen", "http_listen", "json_listen"} {
		if !regexp.MustCompile(`^127\.0\.0\.1:[1-9][0-9]*$`).MatchString(serving[key]) {
			t.Errorf("idemd serves %s on %q; idemd.env said 127.0.0.1:0, the unit 0.0.0.0", key, serving[key])
		}
	}
	if want := filepath.Join(dataDir, "idem.db"); serving["database"] != want {
		t.Errorf("idemd's database is %q; idemd.env's IDEM_DATA_DIR makes it %s", serving["database"], want)
	}
	if want := filepath.Join(credentials, "config.yaml"); loaded["file"] != want {
		t.Errorf("idemd loaded the config %q; the unit's IDEM_CONFIG is %s:\n%s", loaded["file"], want, strings.Join(logged, "\n"))
	}
}

// textLogFields reads the key=value pairs of a line of slog's text format.
func textLogFields(line string) map[string]string {
	fields := map[string]string{}
	for _, m := range regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S*)`).FindAllStringSubmatch(line, -1) {
		v := m[2]
		if strings.HasPrefix(v, `"`) {
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
		}
		fields[m[1]] = v
	}
	return fields
}
