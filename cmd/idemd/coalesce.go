package main

import (
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/coalesce"
	"github.com/idemhq/idem/store/postgres"
	"github.com/idemhq/idem/store/readfirst"
)

// coalesceFlags are serve's bounds of the coalescer that gathers concurrent
// calls into the PostgreSQL store's many-row statements (store/coalesce).
type coalesceFlags struct {
	CoalesceMaxInFlight int  `name:"coalesce-max-in-flight" default:"${coalesce_max_in_flight}" env:"IDEM_COALESCE_MAX_IN_FLIGHT" help:"PostgreSQL: how many batches of one kind of call (Claim, Complete, Fail, Heartbeat) run at once; concurrent calls that arrive meanwhile go together in the next (0 to 256; 0 sends every call on its own). ${default} by default."`
	CoalesceMaxRows     int  `name:"coalesce-max-rows" default:"${coalesce_max_rows}" env:"IDEM_COALESCE_MAX_ROWS" help:"PostgreSQL: most calls in one batch (1 to 10000). ${default} by default."`
	ReadFirst           bool `name:"read-first" default:"true" negatable:"" env:"IDEM_READ_FIRST" help:"A Claim of a record this idemd lately saw finished reads it first, so that a redelivery's replay is a plain read that waits for no write (store/readfirst). --no-read-first sends every Claim to the store's claim statement."`
}

// The upper bounds of the flags.
const (
	maxCoalesceInFlight = 256
	maxCoalesceRows     = 10000
)

func (f coalesceFlags) validate() error {
	if f.CoalesceMaxInFlight < 0 || f.CoalesceMaxInFlight > maxCoalesceInFlight {
		return fmt.Errorf("--coalesce-max-in-flight is %d; it must be between 0 (off) and %d", f.CoalesceMaxInFlight, maxCoalesceInFlight)
	}
	if f.CoalesceMaxRows < 1 || f.CoalesceMaxRows > maxCoalesceRows {
		return fmt.Errorf("--coalesce-max-rows is %d; it must be between 1 and %d", f.CoalesceMaxRows, maxCoalesceRows)
	}
	return nil
}

// coalesce puts the PostgreSQL store of db behind the coalescer, unless the
// flags turn it off; the SQLite store's writer commits concurrent calls
// together by itself. tp, when not nil, traces the calls and batches.
func (f coalesceFlags) coalesce(db *database, tp trace.TracerProvider) {
	defer func() {
		if f.ReadFirst {
			db.Backend = store.Layer(db.Backend, readfirst.New(db.Backend, 0))
		}
	}()
	if _, ok := db.Backend.(*postgres.Backend); !ok || f.CoalesceMaxInFlight == 0 {
		return
	}
	opts := coalesce.Options{MaxInFlight: f.CoalesceMaxInFlight, MaxRows: f.CoalesceMaxRows}
	if tp != nil {
		opts.Tracer = tp.Tracer("github.com/idemhq/idem/store/coalesce")
		opts.SpanAttributes = []attribute.KeyValue{attribute.String("db.system.name", "postgresql")}
	}
	db.Backend = coalesce.NewBackend(db.Backend, opts)
}
