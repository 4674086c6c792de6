// Package buildcache builds the binaries the SDK scenario suites run
// (sdkharness and idemd) into one directory per checkout that outlives the
// suites, so that a build with nothing changed neither compiles (the go
// command's cache) nor links (go build leaves an up-to-date binary alone):
// each suite of `make test` starts idemd without waiting for a link.
package buildcache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Binary builds the main package pkg (such as "./cmd/idemd") of the module
// in root as name, with the go build flags, and returns its path. A name
// stands for one set of flags: binaries built otherwise need another name. Builds of one checkout take turns,
// so that two suites starting at once do not write one file together.
func Binary(root, pkg, name string, flags ...string) (string, error) {
	dir, err := Dir(root)
	if err != nil {
		return "", err
	}
	unlock, err := lock(filepath.Join(dir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", append(append([]string{"build", "-o", bin}, flags...), pkg)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// Dir is the directory of root's binaries: in the temporary directory, per
// user and checkout. The go command writes its link output there too, so
// the finished binary is renamed into place, never half written.
func Dir(root string) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(abs))
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("idem-sdkharness-bin-%d", os.Getuid()), hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("the build directory of the SDK harness: %w", err)
	}
	return dir, nil
}
