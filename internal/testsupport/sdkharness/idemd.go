package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// idemdProcess is idemd serving on addresses it keeps across restarts.
type idemdProcess struct {
	bin      string
	args     []string
	log      io.Writer
	grpcAddr string
	jsonAddr string
	httpAddr string // /readyz

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	killed bool          // the harness stopped it on purpose
}

// start starts idemd and waits until it serves.
func (p *idemdProcess) start(ctx context.Context) error {
	p.mu.Lock()
	if p.cmd != nil {
		p.mu.Unlock()
		return errors.New("idemd is running already")
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.Env = idemdEnv()
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		p.mu.Unlock()
		return fmt.Errorf("start idemd: %w", err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.killed = cmd, exited, false
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		if !p.killed {
			fmt.Fprintf(p.log, "sdkharness: idemd exited by itself: %v\n", err)
		}
		if p.cmd == cmd {
			p.cmd = nil
		}
		p.mu.Unlock()
		close(exited)
	}()
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := p.waitReady(ctx); err != nil {
		_ = p.kill()
		return err
	}
	return nil
}

// idemdEnv is the harness's environment without idemd's own variables, so
// that nothing but the harness's flags configures it.
func idemdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEM_") {
			env = append(env, kv)
		}
	}
	return env
}

// waitReady waits until idemd accepts connections on both API listeners and
// its /readyz says the store answers.
func (p *idemdProcess) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 3 * time.Second}
	var last error
	for {
		p.mu.Lock()
		exited := p.exited
		running := p.cmd != nil
		p.mu.Unlock()
		if !running {
			return errors.New("idemd is not running (its log is on the harness's stderr)")
		}
		if last = p.check(ctx, client); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last: %v", ctx.Err(), last)
		case <-exited:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (p *idemdProcess) check(ctx context.Context, client *http.Client) error {
	for _, addr := range []string{p.grpcAddr, p.jsonAddr} {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		c.Close()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.httpAddr+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %s", resp.Status)
	}
	return nil
}

// kill stops idemd with SIGKILL, as a crash would, and waits until it is
// gone. Killing a stopped idemd does nothing.
func (p *idemdProcess) kill() error {
	return p.signal(syscall.SIGKILL, 0)
}

// stop asks idemd to shut down (SIGTERM) and kills it after grace.
func (p *idemdProcess) stop(grace time.Duration) error {
	return p.signal(syscall.SIGTERM, grace)
}

func (p *idemdProcess) signal(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd == nil {
		p.mu.Unlock()
		return nil
	}
	p.killed = true
	p.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal idemd: %w", err)
	}
	if sig != syscall.SIGKILL {
		select {
		case <-exited:
			return nil
		case <-time.After(grace):
			fmt.Fprintf(p.log, "sdkharness: idemd did not stop within %s of %s; killing it\n", grace, sig)
			_ = cmd.Process.Kill()
		}
	}
	<-exited
	return nil
}
