//go:build robustness && unix

package robustness

// The PgBouncer scenarios of make robustness: idemd behind a real PgBouncer
// in transaction mode and in session mode, PgBouncer killed and restarted,
// and Postgres restarted behind it.

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testsupport/testdb"
)

func TestRobustnessPgBouncer(t *testing.T) {
	if !*full {
		t.Skip("the PgBouncer scenarios run in make robustness only")
	}
	seed := uint64(200)
	for _, mode := range []string{"transaction", "session"} {
		for _, fault := range []string{"kill", "postgres-restart"} {
			seed++
			name := "pgbouncer-" + mode + "-" + fault
			t.Run(name, func(t *testing.T) { pgbouncerScenario(t, name, mode, fault, seed) })
		}
	}
}

func pgbouncerScenario(t *testing.T, name, mode, fault string, seed uint64) {
	c := cluster(t)
	db := "robust_" + strings.ReplaceAll(name, "-", "_")
	newDatabase(t, c, name)
	// Behind a pooler idemd cannot set statement_timeout itself: the
	// database carries it, as ALTER ROLE would in production.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	conn, err := pgx.Connect(ctx, c.URL)
	if err == nil {
		_, err = conn.Exec(ctx, "ALTER DATABASE "+db+" SET statement_timeout = '10s'")
		conn.Close(ctx)
	}
	cancel()
	if err != nil {
		t.Fatalf("set the database's statement_timeout: %v", err)
	}
	bouncer, err := testdb.StartPgBouncer(c.URL, mode)
	if err != nil {
		t.Fatalf("start PgBouncer (pool_mode=%s): %v", mode, err)
	}
	t.Cleanup(bouncer.Close)
	// A session pool needs a server connection for each of idemd's and
	// for its listener.
	if err := bouncer.AddDatabase(db, db, "postgres", c.Password(), 10); err != nil {
		t.Fatal(err)
	}
	d := startIdemd(t, name, "--database-url", bouncer.URL(db)+"&pool_max_conns=8", "--database-pooler", mode)

	sc := scenario{name: name, strict: true}
	w := workload(addrs(d), seed)
	runCtx, cancelRun := context.WithTimeout(t.Context(), w.Duration)
	defer cancelRun()
	faults := 0
	switch fault {
	case "kill":
		sc.injected = fmt.Sprintf("idemd --database-pooler=%s behind PgBouncer (pool_mode=%s); PgBouncer killed -9 every 1.5–2.5 s, restarted 0.3–0.8 s later", mode, mode)
		w.Settle = faultLoop(runCtx, t, seed, func(rng *mrand.Rand) error {
			pause(runCtx, jitter(rng, 1500*time.Millisecond, 2500*time.Millisecond))
			if err := bouncer.Kill(); err != nil {
				return err
			}
			faults++
			pause(runCtx, jitter(rng, 300*time.Millisecond, 800*time.Millisecond))
			return bouncer.Start()
		}, func() error {
			if bouncer.Running() {
				return nil
			}
			return bouncer.Start()
		})
	case "postgres-restart":
		sc.injected = fmt.Sprintf("idemd --database-pooler=%s behind PgBouncer (pool_mode=%s); Postgres behind it stopped with pg_ctl -m immediate every 1.5–2.5 s, started 0.3–0.8 s later", mode, mode)
		down := false
		w.Settle = faultLoop(runCtx, t, seed, func(rng *mrand.Rand) error {
			pause(runCtx, jitter(rng, 1500*time.Millisecond, 2500*time.Millisecond))
			if err := c.Stop("immediate"); err != nil {
				return err
			}
			down = true
			faults++
			pause(runCtx, jitter(rng, 300*time.Millisecond, 800*time.Millisecond))
			if err := c.Start(); err != nil {
				return err
			}
			down = false
			return nil
		}, func() error {
			if down {
				return c.Start()
			}
			return nil
		})
	}
	sc.run(t, w, func(*Result) string {
		what := "PgBouncer kills"
		if fault == "postgres-restart" {
			what = "immediate restarts of Postgres"
		}
		return fmt.Sprintf("%d %s; idemd never restarted", faults, what)
	})
}
