//go:build unix

package testdb

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

var aptUpdate struct {
	once sync.Once
	err  error
}

// NeedCommand returns the path of command, installing the Debian package pkg
// that provides it when it is missing and this process may (it runs as root
// and apt-get exists): apt-get update once per process, then apt-get install.
// Its error says what to install by hand otherwise.
func NeedCommand(command, pkg string) (string, error) {
	if p, err := lookCommand(command); err == nil {
		return p, nil
	}
	hint := fmt.Sprintf("%s is not installed: install the package that has it (Debian/Ubuntu: apt-get install %s)", command, pkg)
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%s; the tests install it themselves only when they run as root", hint)
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "", fmt.Errorf("%s; there is no apt-get here to install it with", hint)
	}
	aptUpdate.once.Do(func() {
		if out, err := exec.Command("apt-get", "update", "-qq").CombinedOutput(); err != nil {
			aptUpdate.err = fmt.Errorf("apt-get update: %v: %s", err, lastLines(string(out), 3))
		}
	})
	if aptUpdate.err != nil {
		return "", fmt.Errorf("%s; %v", hint, aptUpdate.err)
	}
	install := exec.Command("apt-get", "install", "-y", "-qq", "--no-install-recommends", pkg)
	install.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := install.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s; apt-get install %s: %v: %s", hint, pkg, err, lastLines(string(out), 3))
	}
	p, err := lookCommand(command)
	if err != nil {
		return "", fmt.Errorf("%s; apt-get installed %s but %s is still not on PATH", hint, pkg, command)
	}
	return p, nil
}

// lookCommand finds command on PATH, or in /usr/sbin, where Debian puts
// daemons (pgbouncer) and which a user's PATH may leave out.
func lookCommand(command string) (string, error) {
	p, err := exec.LookPath(command)
	if err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin"} {
		if q, qerr := exec.LookPath(filepath.Join(dir, command)); qerr == nil {
			return q, nil
		}
	}
	return "", err
}

// lastLines is the last n lines of s, on one line.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
