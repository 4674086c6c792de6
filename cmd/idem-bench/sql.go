package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sqlTarget is the pattern idem replaces: a dedupe table written by hand with
// two statements, an INSERT … ON CONFLICT DO NOTHING RETURNING that claims
// the key, and an UPDATE that marks it completed with its result. It has none
// of idem's guarantees (no lease, no fencing token, no takeover of a dead
// worker's key; a duplicate cannot tell a running job from a finished one and
// gets no result back), so it is the floor idem's cost is measured against.
// It lives in a schema of its own, created for the run and dropped after it.
type sqlTarget struct {
	pool    *pgxpool.Pool
	schema  string
	url     string
	appName string // application_name of the pool's connections

	namespace string
	result    []byte
	insertSQL string
	updateSQL string
}

func openSQL(ctx context.Context, url, schema, appName string, maxConns int32, namespace string, result []byte) (*sqlTarget, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("sql target: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("sql target: no Postgres answers at %s: %w", redactURL(url), err)
	}
	table := pgx.Identifier{schema, "idempotency_keys"}.Sanitize()
	t := &sqlTarget{
		pool: pool, schema: schema, url: url, appName: appName, namespace: namespace, result: result,
		insertSQL: `INSERT INTO ` + table + ` (namespace, key, status) VALUES ($1, $2, 'started')
			ON CONFLICT DO NOTHING RETURNING true`,
		updateSQL: `UPDATE ` + table + ` SET status = 'completed', result = $3, updated_at = now()
			WHERE namespace = $1 AND key = $2`,
	}
	_, err = pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()+`;
		CREATE TABLE `+table+` (
			namespace  text        NOT NULL,
			key        text        NOT NULL,
			status     text        NOT NULL,
			result     bytea,
			created_at timestamptz NOT NULL DEFAULT now(),
			updated_at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (namespace, key)
		)`)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("sql target: create schema %s: %w", schema, err)
	}
	return t, nil
}

func (t *sqlTarget) name() string { return "sql" }

func (t *sqlTarget) job(ctx context.Context, key string) (outcome, time.Duration, error) {
	start := time.Now()
	var inserted bool
	err := t.pool.QueryRow(ctx, t.insertSQL, t.namespace, key).Scan(&inserted)
	claimTook := time.Since(start)
	if errors.Is(err, pgx.ErrNoRows) {
		return outcomeDuplicate, claimTook, nil
	}
	if err != nil {
		return 0, claimTook, fmt.Errorf("INSERT: %w", err)
	}
	if _, err := t.pool.Exec(ctx, t.updateSQL, t.namespace, key, t.result); err != nil {
		return 0, claimTook, fmt.Errorf("UPDATE: %w", err)
	}
	return outcomeAcquired, claimTook, nil
}

func (t *sqlTarget) pgApp() string { return t.appName }

func (t *sqlTarget) poolAcquires(context.Context) (int64, time.Duration) {
	st := t.pool.Stat()
	return st.AcquireCount(), st.AcquireDuration()
}

func (t *sqlTarget) close(ctx context.Context) error {
	t.pool.Close()
	return dropSchema(ctx, t.url, t.schema)
}

// dropSchema drops a schema the benchmark created, on a connection of its
// own (the pools are closed by then).
func dropSchema(ctx context.Context, url, schema string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", schema, err)
	}
	return nil
}
