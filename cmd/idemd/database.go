package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/postgres"
	"github.com/idemhq/idem/store/sqlite"
)

type databaseFlags struct {
	// A pointer, so that an empty URL given on purpose (a script's unset
	// variable) is refused rather than taken for "no URL" and answered with
	// a fresh SQLite file.
	DatabaseURL *string `name:"database-url" env:"IDEM_DATABASE_URL" placeholder:"URL" help:"postgres://… or postgresql://… for PostgreSQL, the production store (search_path=SCHEMA keeps idem in its own schema, pool_max_conns=N sizes the pool, 16 by default), or sqlite:///path/to/file.db. Without it idemd runs on SQLite in --data-dir."`
	DataDir     string  `name:"data-dir" default:"./idem-data" env:"IDEM_DATA_DIR" placeholder:"DIR" help:"Directory of the embedded SQLite store (idem.db in it) when there is no --database-url; ${default} by default."`
}

// sqliteFileName is the database file inside --data-dir.
const sqliteFileName = "idem.db"

// database is the store a command runs on, open. Nothing in idemd asks which
// store it is: what differs between them is behind store.Backend.
type database struct {
	store.Backend
	// name says which store it is, for logs and messages: the redacted
	// Postgres URL or the SQLite file.
	name string
	// implicit is true when SQLite was chosen because no URL was given.
	implicit bool
	// inProcess is true when the store's work runs in idemd's process
	// (SQLite), not in a server of its own (setProcs).
	inProcess bool
	// unlock releases what open holds besides the store (SQLite's lock file).
	unlock func()
}

// Close closes the store and releases its lock.
func (d *database) Close() {
	_ = d.Backend.Close()
	d.unlock()
}

// open opens the store the flags choose: Postgres for a postgres:// URL,
// SQLite for a sqlite: URL or no URL at all. Postgres's schema is left as it
// is (serve and migrate decide what to do about it); SQLite's is migrated by
// opening it. Errors are one line that says what to check. A tracer
// provider traces the Postgres store's calls and statements; nil traces
// nothing. The SQLite store is not traced.
func (f databaseFlags) open(ctx context.Context, tp trace.TracerProvider) (*database, error) {
	path, implicit, err := f.sqlitePath()
	if err != nil {
		return nil, err
	}
	if path == "" {
		b, err := postgres.OpenBackend(ctx, *f.DatabaseURL, tp)
		if err != nil {
			return nil, fmt.Errorf("cannot reach the database at %s: %s", redactURL(*f.DatabaseURL), oneLine(err))
		}
		return &database{Backend: b, name: redactURL(*f.DatabaseURL), unlock: func() {}}, nil
	}
	unlock, err := lockDatabase(path)
	if err != nil {
		return nil, err
	}
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("open the SQLite database %s: %s", path, oneLine(err))
	}
	return &database{Backend: st, name: path, implicit: implicit, inProcess: true, unlock: unlock}, nil
}

// sqlitePath returns the SQLite file the flags choose, or "" for Postgres;
// implicit is true when it is --data-dir's because there is no URL.
func (f databaseFlags) sqlitePath() (path string, implicit bool, err error) {
	if f.DatabaseURL == nil {
		if strings.TrimSpace(f.DataDir) == "" {
			return "", false, errors.New("--data-dir is empty; pass a directory for the SQLite store, or --database-url")
		}
		return filepath.Join(f.DataDir, sqliteFileName), true, nil
	}
	raw := strings.TrimSpace(*f.DatabaseURL)
	if raw == "" {
		// pgx would otherwise fall back to libpq's defaults (a local socket,
		// the OS user's database) and quietly migrate whatever it finds there.
		return "", false, errors.New("--database-url is empty; pass a postgres:// or sqlite:/// URL, or leave it out (and IDEM_DATABASE_URL unset) to run on SQLite in --data-dir")
	}
	scheme, _, hasScheme := strings.Cut(raw, "://")
	if !hasScheme {
		if rest, ok := strings.CutPrefix(raw, "sqlite:"); ok {
			return sqliteURLPath("", rest, raw)
		}
		return "", false, nil // a keyword/value DSN (host=… dbname=…), for pgx
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		return "", false, nil
	case "sqlite":
		u, err := url.Parse(raw)
		if err != nil {
			return "", false, fmt.Errorf("--database-url %q does not parse: %v", raw, err)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return "", false, fmt.Errorf("--database-url %s: a sqlite URL takes no parameters", raw)
		}
		return sqliteURLPath(u.Host, u.Path, raw)
	}
	return "", false, fmt.Errorf("--database-url has the scheme %q; idemd knows postgres://…, postgresql://… and sqlite:///path/to/file.db", scheme)
}

func sqliteURLPath(host, path, raw string) (string, bool, error) {
	if host != "" {
		return "", false, fmt.Errorf("--database-url %s names a host; a SQLite file is local: sqlite:///absolute/path.db or sqlite:relative/path.db", raw)
	}
	if strings.Contains(path, "?") || path == "" || strings.HasSuffix(path, "/") {
		return "", false, fmt.Errorf("--database-url %s does not name a file: sqlite:///absolute/path.db or sqlite:relative/path.db", raw)
	}
	return filepath.Clean(path), false, nil
}

// checkSchema returns an error unless the schema is the version this idemd
// needs; what says what to run about it.
func (d *database) checkSchema(ctx context.Context, what string) error {
	v, err := d.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if latest := d.LatestVersion(); v != latest {
		return fmt.Errorf("the schema is at version %d and this idemd needs %d: %s", v, latest, what)
	}
	return nil
}

// ready returns nil when the store can serve: the database answers and its
// schema is the version this idemd expects. Its error is the reason, for
// /readyz.
func (d *database) ready(ctx context.Context) error {
	v, err := d.SchemaVersion(ctx)
	switch {
	case err != nil:
		return errors.New("the database does not answer")
	case v != d.LatestVersion():
		return fmt.Errorf("the schema is at version %d, this idemd needs %d", v, d.LatestVersion())
	}
	return nil
}
