// Package migrations holds idem's PostgreSQL schema as numbered SQL files,
// embedded in every binary, and reads numbered migrations from any file
// system. store/postgres applies these in order; the idemd migrate command
// and the test helpers run the same code. store/sqlite keeps its own files
// and reads them with Parse.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// FS holds the PostgreSQL migrations, named NNN_description.sql.
//
//go:embed *.sql
var FS embed.FS

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Parse reads the migrations at the top of fsys, named NNN_description.sql,
// and returns them in order of version. Two files with one version are an
// error, as is any other file name.
func Parse(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("migration %q: the name must be NNN_description.sql", name)
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: version, Name: name, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %q and %q share version %d", out[i-1].Name, out[i].Name, out[i].Version)
		}
	}
	return out, nil
}
