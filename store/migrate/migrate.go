// Package migrate applies a store's schema: numbered SQL files that the store
// embeds next to its code, read from an fs.FS. Every store uses this one
// runner; each supplies its own files and a Tx that knows its SQL dialect and
// its lock. The idemd migrate command, idemd serve and the test helpers all
// reach it through the store, so they apply the schema the same way.
package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strconv"
	"strings"
)

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

// Source is a store's migrations: the numbered files of one directory.
type Source struct {
	fsys fs.FS
	err  error
}

// Dir is the migrations in the directory dir of fsys, such as the
// "migrations" directory of a store's embed.FS.
func Dir(fsys fs.FS, dir string) Source {
	sub, err := fs.Sub(fsys, dir)
	return Source{fsys: sub, err: err}
}

// Migrations parses the source's files, in order of version.
func (s Source) Migrations() ([]Migration, error) {
	if s.err != nil {
		return nil, s.err
	}
	return Parse(s.fsys)
}

// Latest is the newest version of the source, 0 when it has none or does
// not parse.
func (s Source) Latest() int {
	ms, err := s.Migrations()
	if err != nil {
		return 0
	}
	return Latest(ms)
}

// Latest is the version of the newest of ms, 0 when there are none.
func Latest(ms []Migration) int {
	if len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// Script is the SQL that migrating a database would run, for a person to
// review or to run by hand: the statements of the store's migration
// transaction, the pending migrations' SQL among them.
type Script struct {
	// From is the schema's version now; To is its version after the
	// script. They are equal when nothing is pending.
	From, To int
	// SQL is the script, "" when nothing is pending.
	SQL string
}

// Pending is the migrations of ms newer than version from.
func Pending(ms []Migration, from int) []Migration {
	var out []Migration
	for _, m := range ms {
		if m.Version > from {
			out = append(out, m)
		}
	}
	return out
}

// QuoteLiteral quotes s as an SQL string literal, for the scripts: both
// stores read a doubled single quote inside one as a quote.
func QuoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// Tx is one store's database inside the transaction that migrates it. The
// store opens that transaction holding a lock of its own, so that processes
// starting together apply each migration once.
type Tx interface {
	// Version creates the version table when it is missing and returns the
	// newest version recorded in it, 0 when none is.
	Version(ctx context.Context) (int, error)
	// Apply runs m's SQL and records m as applied.
	Apply(ctx context.Context, m Migration) error
}

// Newer says what Up does with a database whose schema is newer than every
// migration the binary has.
type Newer int

const (
	// RefuseNewer makes Up fail with a *NewerSchemaError: the binary must not
	// write to a schema it does not know.
	RefuseNewer Newer = iota
	// WarnNewer makes Up log a warning and apply nothing: during a rolling
	// deploy the replicas still on the old binary meet the schema that the
	// new ones applied.
	WarnNewer
)

// NewerSchemaError is a database whose schema is newer than the binary's.
type NewerSchemaError struct {
	Schema, Binary int
}

func (e *NewerSchemaError) Error() string {
	return fmt.Sprintf("the database's schema is at version %d, newer than this binary's %d: run a newer idemd", e.Schema, e.Binary)
}

// Up applies to tx, in order, the migrations of ms newer than its schema and
// returns their versions; none when the schema is up to date. A schema newer
// than ms is refused or logged to logger, as newer says.
func Up(ctx context.Context, tx Tx, ms []Migration, newer Newer, logger *slog.Logger) ([]int, error) {
	current, err := tx.Version(ctx)
	if err != nil {
		return nil, err
	}
	if latest := Latest(ms); current > latest {
		schemaErr := &NewerSchemaError{Schema: current, Binary: latest}
		if newer == RefuseNewer {
			return nil, schemaErr
		}
		logger.Warn(schemaErr.Error()+"; applying nothing (an older replica during a rolling deploy)",
			"schema_version", current, "binary_version", latest)
		return nil, nil
	}
	var applied []int
	for _, m := range ms {
		if m.Version <= current {
			continue
		}
		if err := tx.Apply(ctx, m); err != nil {
			return nil, fmt.Errorf("migration %s: %w", m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}
