package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// The connection pooler in front of PostgreSQL (postgres.Options).
	DatabasePooler string `name:"database-pooler" enum:"none,session,transaction" default:"none" env:"IDEM_DATABASE_POOLER" help:"What stands between idemd and PostgreSQL: none (a direct connection, or a proxy that passes sessions through); session (a pooler in session mode, such as PgBouncer's pool_mode=session: idemd SETs its settings after connecting instead of sending them at startup); transaction (PgBouncer's pool_mode=transaction and the like: no startup parameters, no named prepared statements, statement_timeout from the role (ALTER ROLE … SET statement_timeout = '10s'), and waiting Claims woken through serve's --database-listen-url, or by polling every 250ms without it). ${default} by default."`
	// listenURL is serve's --database-listen-url, which serve sets before
	// it opens the store.
	listenURL string `kong:"-"`
}

// postgresOptions are the flags' postgres.Options, checked.
func (f databaseFlags) postgresOptions() (postgres.Options, error) {
	pooler, err := postgres.ParsePooler(f.DatabasePooler)
	if err != nil {
		return postgres.Options{}, fmt.Errorf("--database-pooler: %w", err)
	}
	listen := strings.TrimSpace(f.listenURL)
	if listen != "" {
		scheme, _, _ := strings.Cut(listen, "://")
		if s := strings.ToLower(scheme); s != "postgres" && s != "postgresql" {
			return postgres.Options{}, errors.New("--database-listen-url must be a postgres:// or postgresql:// URL: a direct connection to the primary for LISTEN")
		}
	}
	return postgres.Options{Pooler: pooler, ListenURL: listen}, nil
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
	// unlock releases what open holds besides the store (SQLite's lock file).
	unlock func()
	// pooler is the connection pooler in front of PostgreSQL, and
	// listenURL whether LISTEN has a connection string of its own.
	pooler    postgres.Pooler
	listenURL bool
}

// poolerNotes logs what a transaction pooler in front changes: how waiting
// Claims are woken, and a statement_timeout that nothing sets.
func (d *database) poolerNotes(ctx context.Context, logger *slog.Logger) {
	if d.pooler != postgres.TransactionPooler {
		return
	}
	if !d.listenURL {
		logger.Info("behind a transaction pooler without --database-listen-url: waiting Claims are woken by polling",
			"interval", postgres.WakePollInterval)
	}
	b, ok := d.Backend.(*postgres.Backend)
	if !ok {
		return
	}
	timeout, err := b.StatementTimeoutSetting(ctx)
	if err != nil {
		logger.Warn("could not read statement_timeout", "error", err)
		return
	}
	if timeout == "0" {
		logger.Warn("idemd's connections have no statement_timeout: behind a transaction pooler idemd cannot set it itself; "+
			"set it on idemd's role (ALTER ROLE … SET statement_timeout = '10s'), so that a statement stuck on a broken database is cancelled",
			"want", postgres.StatementTimeout)
	}
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
	opts, err := f.postgresOptions()
	if err != nil {
		return nil, err
	}
	if path == "" {
		b, err := postgres.OpenBackendWith(ctx, *f.DatabaseURL, tp, opts)
		if err != nil {
			msg := fmt.Sprintf("cannot reach the database at %s: %s", redactURL(*f.DatabaseURL), oneLine(err))
			if strings.Contains(err.Error(), "unsupported startup parameter") {
				// PgBouncer's refusal: it passes only the few parameters it tracks.
				msg += "; a connection pooler in front of the database refuses a setting sent at connect: start idemd with --database-pooler=transaction " +
					"(or session, for a pooler in session mode), and set on the role what the URL sets as a parameter (ALTER ROLE … SET search_path = …)"
			}
			return nil, errors.New(msg)
		}
		return &database{Backend: b, name: redactURL(*f.DatabaseURL), pooler: opts.Pooler, listenURL: opts.ListenURL != "", unlock: func() {}}, nil
	}
	if opts.Pooler != postgres.NoPooler || opts.ListenURL != "" {
		return nil, errors.New("--database-pooler and --database-listen-url are for PostgreSQL; the SQLite store has no connections to pool")
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
	return &database{Backend: st, name: path, implicit: implicit, unlock: unlock}, nil
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
