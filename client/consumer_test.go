package client_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestConsumerModuleGetsReleasedVersions is what a program that imports the
// SDK gets in its go.mod: a module in a temporary directory that requires
// only github.com/idemhq/idem (from this checkout) and imports only
// package client, tidied with the go command (which asks the module proxy).
// Its go directive must be the one idem's go.mod declares (the oldest Go
// that idem's dependencies allow), and every module
// it requires a released version: no pseudo-version, no pre-release, except
// for a module that has never tagged a release (googleapis' genproto), for
// which a pseudo-version is all there is.
func TestConsumerModuleGetsReleasedVersions(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	declared := readGoMod(t, root, filepath.Join(root, "go.mod")).Go
	// The oldest Go idem's module builds with is the newest that a module
	// it takes packages from declares (the go command refuses an older one).
	var needed, neededBy string
	for _, line := range strings.Split(string(goCmd(t, root, "list", "-deps", "-test", "-f",
		"{{with .Module}}{{if not .Main}}{{.GoVersion}} {{.Path}}{{end}}{{end}}", "./...")), "\n") {
		if v, path, ok := strings.Cut(line, " "); ok && compareGo(v, needed) > 0 {
			needed, neededBy = v, path
		}
	}
	if declared != needed {
		t.Errorf("idem's go.mod declares go %s; the newest Go any of its dependencies needs is %s (%s): declare go %s, the oldest Go that builds idem",
			declared, needed, neededBy, needed)
	}

	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// go 1.21 is older than any version idem can declare: tidy raises it to
	// what the requirements need.
	write("go.mod", "module example.com/consumer\n\ngo 1.21\n\n"+
		"require github.com/idemhq/idem v0.0.0-00010101000000-000000000000\n\n"+
		"replace github.com/idemhq/idem => "+root+"\n")
	write("main.go", `package main

import "github.com/idemhq/idem/client"

func main() {
	c, err := client.New("127.0.0.1:7070", client.WithInsecure())
	if err != nil {
		panic(err)
	}
	defer c.Close()
}
`)
	goCmd(t, dir, "mod", "tidy")
	consumer := readGoMod(t, dir, filepath.Join(dir, "go.mod"))

	if consumer.Go != declared {
		t.Errorf("the consumer's go.mod says go %s after go mod tidy; idem's go.mod declares go %s. "+
			"A requirement of idem needs a newer Go than idem declares: raise idem's go directive to %s, or require an older version of that module.",
			consumer.Go, declared, consumer.Go)
	}
	if consumer.Toolchain != "" {
		t.Errorf("the consumer's go.mod got a toolchain line (%s): idem must not make its users switch toolchains", consumer.Toolchain)
	}

	var unreleased []string
	for _, r := range consumer.Require {
		if r.Path != "github.com/idemhq/idem" && !releasedVersion.MatchString(r.Version) {
			unreleased = append(unreleased, r.Path)
		}
	}
	if len(unreleased) == 0 {
		return
	}
	// A pseudo-version is acceptable only where the module has no release
	// to require instead.
	out := goCmd(t, dir, append([]string{"list", "-m", "-versions", "-json"}, unreleased...)...)
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var m struct {
			Path     string
			Version  string
			Versions []string // tagged versions, pre-releases included
		}
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("go list -m -versions -json: %v\n%s", err, out)
		}
		var released []string
		for _, v := range m.Versions {
			if releasedVersion.MatchString(v) {
				released = append(released, v)
			}
		}
		if len(released) > 0 {
			t.Errorf("a module that requires only idem's client gets %s %s, which is not a released version; %s has released versions up to %s. "+
				"Require a released version in idem's go.mod (and keep whatever forces this one out of idem's module graph).",
				m.Path, m.Version, m.Path, released[len(released)-1])
		} else {
			t.Logf("%s %s: a pseudo-version, as the module has no released version", m.Path, m.Version)
		}
	}
}

// releasedVersion matches a semantic version that is neither a pre-release
// nor a pseudo-version (which the go command writes as pre-releases).
var releasedVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(\+incompatible)?$`)

// compareGo compares two go directives' versions as the go command does
// for the ones modules declare: 1.26 (the language) before 1.26.0 (its
// first release) before 1.26.1. "" is before every version.
func compareGo(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		switch {
		case i >= len(as):
			return -1
		case i >= len(bs):
			return 1
		}
		x, _ := strconv.Atoi(as[i])
		y, _ := strconv.Atoi(bs[i])
		if c := cmp.Compare(x, y); c != 0 {
			return c
		}
	}
	return 0
}

type goMod struct {
	Go        string
	Toolchain string
	Require   []struct {
		Path    string
		Version string
	}
}

func readGoMod(t *testing.T, dir, file string) goMod {
	t.Helper()
	var m goMod
	out := goCmd(t, dir, "mod", "edit", "-json", file)
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("go mod edit -json %s: %v", file, err)
	}
	return m
}

// goCmd runs the go command in dir, resolving modules as a user's machine
// would: through the module proxy, with no workspace, on this toolchain.
func goCmd(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s (in %s): %v\n%s\nThe go command needs the module proxy (GOPROXY) to resolve a consumer's requirements.",
			strings.Join(args, " "), dir, err, stderr.String())
	}
	return out
}
