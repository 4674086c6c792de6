// Package buildinfo says which build of an idem binary is running: the
// version and commit the Makefile stamps into main.version and main.commit,
// or else the module version and commit the go command records, and the Go
// version that built it.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info is what a binary knows about its own build.
type Info struct {
	// Version is the stamped version (make build: git describe), else the
	// module version go install records (v1.2.3), else "(devel)".
	Version string
	// Commit is the VCS revision the binary was built from: the stamped one,
	// else the go command's; "" when neither has one (go run, a build
	// outside a git checkout, or -buildvcs=false without make).
	Commit string
	// Modified is true when the working tree had uncommitted changes.
	Modified bool
	// GoVersion is the Go toolchain that built the binary (go1.26.0).
	GoVersion string
	// Platform is GOOS/GOARCH.
	Platform string
}

// Read returns the build's Info; version and commit are main.version and
// main.commit, "" when the build did not set them.
func Read(version, commit string) Info {
	info := Info{Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		if info.Version == "" {
			info.Version = "(devel)"
		}
		return info
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if info.Commit == "" {
				info.Commit = s.Value
			}
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	if info.Version == "" {
		info.Version = bi.Main.Version
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	return info
}

// Line is the one line that `NAME version` and `NAME --version` print:
//
//	idemd v0.4.0-3-g238f2e5 (commit 238f2e5c1a2b, go1.26.0, linux/amd64)
func (i Info) Line(name string) string {
	var b strings.Builder
	b.WriteString(name + " ")
	commit := "commit unknown"
	if i.Commit != "" {
		commit = "commit " + short(i.Commit)
		if i.Modified {
			commit += " with uncommitted changes"
		}
	}
	fmt.Fprintf(&b, "%s (%s, %s, %s)", i.Version, commit, i.GoVersion, i.Platform)
	return b.String()
}

// short is a commit hash cut to 12 digits, as git shows it in logs.
func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
