package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pooler names what stands between idem and PostgreSQL, for the settings
// that depend on it: how the store's settings reach the server, how its
// statements are sent, and where it LISTENs.
type Pooler string

const (
	// NoPooler: idem's connections are PostgreSQL sessions of their own,
	// directly or through a proxy that passes sessions through (HAProxy, a
	// cloud's endpoint). statement_timeout and plan_cache_mode go as startup
	// parameters, statements are prepared once per connection, and the
	// listener LISTENs on a connection like the pool's.
	NoPooler Pooler = "none"
	// SessionPooler: a pooler that gives each client connection a server
	// connection for the client's whole life (PgBouncer's pool_mode =
	// session) but refuses startup parameters other than the few it tracks.
	// The settings are SET on each connection once it is made; the rest is
	// as with NoPooler.
	SessionPooler Pooler = "session"
	// TransactionPooler: a pooler that may hand each transaction to another
	// server connection (PgBouncer's pool_mode = transaction, and the
	// transaction modes of RDS Proxy, Supavisor and PgCat), so that nothing
	// may live in a session. No startup parameters and no SET: the
	// statement_timeout idem wants belongs on the role (ALTER ROLE … SET
	// statement_timeout = '10s'), where every server connection the pooler
	// opens for that role starts with it and survives the pooler's reset.
	// Statements are sent unnamed with their descriptions cached
	// (pgx.QueryExecModeCacheDescribe): one round trip each, no prepared
	// statement to outlive the transaction, and PostgreSQL plans each
	// execution afresh, so plan_cache_mode has nothing to act on. LISTEN
	// needs a session: the listener connects past the pooler when
	// Options.ListenURL names a direct connection; without one the store
	// polls for the changes that wake waiting Claims (WakePollInterval).
	TransactionPooler Pooler = "transaction"
)

// Poolers lists the Pooler values, for a flag's help.
var Poolers = []Pooler{NoPooler, SessionPooler, TransactionPooler}

// ParsePooler returns the Pooler s names; "" is NoPooler.
func ParsePooler(s string) (Pooler, error) {
	if s == "" {
		return NoPooler, nil
	}
	for _, p := range Poolers {
		if strings.EqualFold(s, string(p)) {
			return p, nil
		}
	}
	return "", fmt.Errorf("pooler %q: want one of none, session, transaction", s)
}

// Options are how the store reaches its database beyond the URL.
type Options struct {
	// Pooler is what stands in front of PostgreSQL. It defaults to
	// NoPooler.
	Pooler Pooler
	// ListenURL, when set, is a connection string for the listener alone:
	// with TransactionPooler, a direct connection to the primary past the
	// pooler (a multi-host URL with target_session_attrs=read-write follows
	// a failover). Empty: the listener uses the pool's configuration, and
	// with TransactionPooler the store polls instead.
	ListenURL string
}

// configure adjusts cfg, parsed from a URL, for pooler.
func configure(cfg *pgxpool.Config, pooler Pooler) error {
	params := cfg.ConnConfig.RuntimeParams
	settings := map[string]string{}
	for name, value := range sessionSettings() {
		if _, ok := params[name]; !ok {
			settings[name] = value
		}
	}
	switch pooler {
	case NoPooler, "":
		for name, value := range settings {
			params[name] = value
		}
	case SessionPooler:
		if len(settings) == 0 {
			return nil
		}
		var sql strings.Builder
		for _, name := range []string{"statement_timeout", "plan_cache_mode"} {
			if value, ok := settings[name]; ok {
				fmt.Fprintf(&sql, "SET %s = %s;", name, quoteLiteral(value))
			}
		}
		set := sql.String()
		next := cfg.AfterConnect
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if _, err := conn.Exec(ctx, set, pgx.QueryExecModeSimpleProtocol); err != nil {
				return fmt.Errorf("set the session's settings: %w", err)
			}
			if next != nil {
				return next(ctx, conn)
			}
			return nil
		}
	case TransactionPooler:
		// A named prepared statement would outlive the transaction that
		// prepared it on a server connection the next one may not get.
		if cfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
			cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		}
	default:
		return fmt.Errorf("pooler %q: want one of none, session, transaction", pooler)
	}
	return nil
}

// sessionSettings are the settings every connection of the store gets
// unless its URL sets them (see ConnectConfig).
func sessionSettings() map[string]string {
	return map[string]string{
		"statement_timeout": fmt.Sprint(StatementTimeout.Milliseconds()),
		"plan_cache_mode":   "force_generic_plan",
	}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// ConnectWith is Connect for a database behind pooler.
func ConnectWith(ctx context.Context, url string, pooler Pooler) (*pgxpool.Pool, error) {
	cfg, err := parseConfig(url)
	if err != nil {
		return nil, err
	}
	return connectConfig(ctx, cfg, pooler)
}

// NewWith returns a Store on pool, made by ConnectWith (or OpenBackendWith)
// with opts.Pooler, whose listener follows opts: a connection of its own to
// opts.ListenURL when set; otherwise one like the pool's, or with
// TransactionPooler none at all, the store polling instead.
func NewWith(pool *pgxpool.Pool, opts Options) (*Store, error) {
	s := New(pool)
	if err := s.feedFrom(opts); err != nil {
		return nil, err
	}
	return s, nil
}

// feedFrom sets how the store hears of the changes that wake its waiting
// Claims, before any waits.
func (s *Store) feedFrom(opts Options) error {
	switch {
	case opts.ListenURL != "":
		cfg, err := pgx.ParseConfig(opts.ListenURL)
		if err != nil {
			return fmt.Errorf("listen URL: %w", err)
		}
		s.listen.config = cfg
	case opts.Pooler == TransactionPooler:
		s.listen.poll = true
	}
	return nil
}

// StatementTimeoutSetting returns the statement_timeout the database gives
// the store's connections, as SHOW prints it ("10s"; "0" for none). Behind
// TransactionPooler it comes from the role, the database or the server,
// not from idem.
func (b *Backend) StatementTimeoutSetting(ctx context.Context) (string, error) {
	var v string
	err := b.pool.QueryRow(ctx, "SELECT current_setting('statement_timeout')").Scan(&v)
	return v, interpretError(err)
}
