package robustness

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Idemd is an idemd process of the built binary, serving on a loopback
// address that it keeps across restarts.
type Idemd struct {
	Bin  string
	Addr string
	// Args follow "serve"; the address and the log go in by themselves.
	Args    []string
	LogPath string
	cmd     *exec.Cmd
	exited  chan struct{}
}

// StartIdemd starts bin serve with args on a free loopback port, logging to
// logPath, and waits until it listens.
func StartIdemd(bin, logPath string, args ...string) (*Idemd, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := lis.Addr().String()
	lis.Close()
	d := &Idemd{Bin: bin, Addr: addr, Args: args, LogPath: logPath}
	return d, d.Start()
}

// Start starts the process again (after Kill) and waits until it accepts
// connections.
func (d *Idemd) Start() error {
	if d.cmd != nil {
		return errors.New("idemd is running")
	}
	logf, err := os.OpenFile(d.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := append([]string{"serve", "--listen", d.Addr, "--http-listen", "", "--json-listen", "", "--log-level", "warn"}, d.Args...)
	cmd := exec.Command(d.Bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	d.cmd, d.exited = cmd, exited
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			d.cmd = nil
			return fmt.Errorf("idemd exited at start: %s", tailFile(d.LogPath))
		default:
		}
		if c, err := net.DialTimeout("tcp", d.Addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			_ = d.Kill()
			return fmt.Errorf("idemd did not listen on %s within 60s: %s", d.Addr, tailFile(d.LogPath))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Kill sends SIGKILL and waits for the process to be gone. Killing a
// stopped idemd does nothing.
func (d *Idemd) Kill() error {
	if d.cmd == nil {
		return nil
	}
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	<-d.exited
	d.cmd = nil
	return nil
}

// Running reports whether the process runs.
func (d *Idemd) Running() bool { return d.cmd != nil }

// RSS returns the process's resident set size in bytes.
func (d *Idemd) RSS() (int64, error) {
	if d.cmd == nil {
		return 0, errors.New("idemd is not running")
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(d.cmd.Process.Pid), "status"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024, err
			}
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}

func tailFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}
