// Package drive builds and runs the sdkharness command for Go tests: the
// Go SDK's scenario suite and the harness's own test start it through here,
// as the other SDKs' suites start it from their languages.
package drive

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testsupport/sdkharness/buildcache"
)

// Info is the JSON line the harness prints.
type Info struct {
	GRPCAddr   string            `json:"grpc_addr"`
	HTTPURL    string            `json:"http_url"`
	ControlURL string            `json:"control_url"`
	Store      string            `json:"store"`
	Tokens     map[string]string `json:"tokens"`
	Namespaces struct {
		Plain    string `json:"plain"`
		Held     string `json:"held"`
		StepHeld string `json:"step_held"`
	} `json:"namespaces"`
	Schema  string `json:"schema"`
	TempDir string `json:"temp_dir"`
}

// Binaries are the harness and the idemd it runs, built once.
type Binaries struct {
	Harness string
	Idemd   string
}

// Build builds the harness and idemd (see package buildcache: with nothing
// changed, it takes a fraction of a second).
func Build() (Binaries, error) { return build("sdkharness") }

// BuildRace is Build with the harness built with -race, for the harness's
// own test: a data race in it makes it exit 66, which Stop reports.
func BuildRace() (Binaries, error) { return build("sdkharness-race", "-race") }

func build(harness string, flags ...string) (Binaries, error) {
	root, err := moduleRoot()
	if err != nil {
		return Binaries{}, err
	}
	var b Binaries
	if b.Harness, err = buildcache.Binary(root, "./internal/testsupport/sdkharness", harness, flags...); err != nil {
		return Binaries{}, err
	}
	if b.Idemd, err = buildcache.Binary(root, "./cmd/idemd", "idemd"); err != nil {
		return Binaries{}, err
	}
	return b, nil
}

// moduleRoot is the directory of the module's go.mod: four levels above this
// file's directory.
func moduleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("drive: cannot find its own source file")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("drive: no go.mod at %s: %w", root, err)
	}
	return root, nil
}

// Harness is one running harness.
type Harness struct {
	Info Info
	cmd  *exec.Cmd
	// stdin held open keeps the harness running; closing it stops it.
	stdin  io.WriteCloser
	stderr *lockedBuffer
	exited chan struct{}
	err    error // cmd.Wait's, once exited is closed
}

// Start runs the harness on store and waits for its line. It stops in
// t.Cleanup, and its stderr (idemd's log with it) is logged when t failed.
func Start(t testing.TB, b Binaries, store string) *Harness {
	t.Helper()
	h, err := StartProcess(b, store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Stop(60 * time.Second); err != nil {
			t.Errorf("stop the harness: %v", err)
		}
		if t.Failed() {
			t.Logf("harness (%s) stderr:\n%s", store, h.Stderr())
		}
	})
	return h
}

// StartProcess is Start without a test: the caller must Stop it.
func StartProcess(b Binaries, store string) (*Harness, error) {
	cmd := exec.Command(b.Harness, "--store", store, "--idemd-bin", b.Idemd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	h := &Harness{cmd: cmd, stdin: stdin, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the harness: %w", err)
	}
	go func() {
		h.err = cmd.Wait()
		close(h.exited)
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line, ok := <-lines:
		if !ok {
			<-h.exited
			return nil, fmt.Errorf("the harness printed no line (%v); stderr:\n%s", h.err, h.Stderr())
		}
		if err := json.Unmarshal([]byte(line), &h.Info); err != nil {
			_ = h.Stop(time.Minute)
			return nil, fmt.Errorf("the harness's line %q: %w", line, err)
		}
		return h, nil
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		<-h.exited
		return nil, fmt.Errorf("the harness printed no line within 3 minutes; stderr:\n%s", h.Stderr())
	}
}

// Pid is the harness's process id.
func (h *Harness) Pid() int { return h.cmd.Process.Pid }

// Exited is closed once the harness has exited.
func (h *Harness) Exited() <-chan struct{} { return h.exited }

// Stderr is what the harness wrote to stderr so far.
func (h *Harness) Stderr() string { return h.stderr.String() }

// Control POSTs path (with its query) to the control URL and fails unless
// it answers 200.
func (h *Harness) Control(path string) error {
	resp, err := http.Post(h.Info.ControlURL+path, "text/plain", nil)
	if err != nil {
		return fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// Stop closes the harness's stdin and waits for it to clean up and exit,
// killing it after timeout. It reports an exit that was not clean.
func (h *Harness) Stop(timeout time.Duration) error {
	_ = h.stdin.Close()
	select {
	case <-h.exited:
	case <-time.After(timeout):
		_ = h.cmd.Process.Kill()
		<-h.exited
		return fmt.Errorf("the harness did not exit within %s of its stdin closing", timeout)
	}
	if h.err != nil {
		return fmt.Errorf("the harness exited with %v", h.err)
	}
	return nil
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
