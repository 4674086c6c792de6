// Package testbin builds the command under test once per test binary, so
// that its tests run the real binary the way a user or a script would.
package testbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Main builds the main package in the current directory (the package whose
// tests are running) as name in a temporary directory, sets *path to it, runs
// the tests, removes the directory and exits. Call it from TestMain.
func Main(m *testing.M, name string, path *string) { MainOf(m, ".", name, path) }

// MainOf is Main for the main package in the directory pkg (such as
// ../idemd), for tests that run another command. The command is built in
// its directory, so in the module that directory belongs to: a module of its
// own, such as cmd/idem-bench, builds idemd as idem's module does.
func MainOf(m *testing.M, pkg, name string, path *string) {
	dir, err := os.MkdirTemp("", name+"-test")
	if err != nil {
		panic(err)
	}
	*path = filepath.Join(dir, name)
	build := exec.Command("go", "build", "-o", *path, ".")
	build.Dir = pkg
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		panic("build " + name + ": " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
