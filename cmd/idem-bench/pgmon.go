package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgMonitor accounts for Postgres per round: the CPU time of the backends
// each target opened (recognised by their application_name), the CPU time
// of backends that exited during the round (the postmaster's reaped
// children; see pgRound for whose), the CPU time of Postgres's own
// background processes, and the WAL written. It reads the CPU times from /proc, so it only counts when
// Postgres runs on this machine; otherwise it reports the WAL alone.
type pgMonitor struct {
	conn       *pgx.Conn
	postmaster uint32 // 0 when Postgres's processes cannot be read
}

// monitorAppName is the application_name of the monitor's own connection,
// whose backend is counted for no target.
const monitorAppName = "idem-bench-monitor"

func openPGMonitor(ctx context.Context, url string) (*pgMonitor, error) {
	u, err := withQuery(url, "application_name", monitorAppName)
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the database at %s: %w", redactURL(url), err)
	}
	m := &pgMonitor{conn: conn}
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("pg_backend_pid(): %w", err)
	}
	// A backend's parent is the postmaster; without /proc/<pid>, Postgres
	// is elsewhere (or in another pid namespace) and its CPU is not ours to
	// read.
	if st, ok := readProcStat(pid); ok {
		m.postmaster = st.ppid
	}
	return m, nil
}

// local reports whether the monitor can read Postgres's processes.
func (m *pgMonitor) local() bool { return m.postmaster != 0 }

func (m *pgMonitor) close(ctx context.Context) error { return m.conn.Close(ctx) }

// pgBackend is one Postgres process at a snapshot.
type pgBackend struct {
	app        string // application_name; "" for background processes
	background bool   // checkpointer, walwriter, … (not a client backend)
	cpu        time.Duration
}

// pgSnapshot is what pgMonitor reads at the start and the end of a round.
type pgSnapshot struct {
	lsn      uint64
	reaped   time.Duration // the postmaster's cutime + cstime
	backends map[uint32]pgBackend
}

// snapshot reads the WAL position and, when Postgres is local, the CPU time
// of every Postgres process and of the postmaster's reaped children.
func (m *pgMonitor) snapshot(ctx context.Context) (pgSnapshot, error) {
	var s pgSnapshot
	var lsn string
	if err := m.conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return s, fmt.Errorf("pg_current_wal_lsn(): %w", err)
	}
	var err error
	if s.lsn, err = parseLSN(lsn); err != nil {
		return s, err
	}
	if !m.local() {
		return s, nil
	}
	rows, err := m.conn.Query(ctx, `SELECT pid, coalesce(application_name, ''), coalesce(backend_type, '') FROM pg_stat_activity`)
	if err != nil {
		return s, fmt.Errorf("pg_stat_activity: %w", err)
	}
	type row struct {
		pid              uint32
		app, backendType string
	}
	var list []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.pid, &r.app, &r.backendType); err != nil {
			rows.Close()
			return s, fmt.Errorf("pg_stat_activity: %w", err)
		}
		list = append(list, r)
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("pg_stat_activity: %w", err)
	}
	s.backends = make(map[uint32]pgBackend, len(list))
	for _, r := range list {
		st, ok := readProcStat(r.pid)
		if !ok {
			continue // exited since the query
		}
		s.backends[r.pid] = pgBackend{app: r.app, background: r.backendType != "client backend", cpu: st.cpu}
	}
	if st, ok := readProcStat(m.postmaster); ok {
		s.reaped = st.childCPU
	}
	return s, nil
}

// pgRound is what Postgres did during one round, charged to its target.
type pgRound struct {
	// own is the CPU time of the target's own backends (those whose
	// application_name is the target's) that were alive at the end of the
	// round, from the start of the round or from their birth.
	own time.Duration
	// reaped is the CPU time, spent during the round, of backends that
	// exited during it, whoever's: the postmaster's reaped children's CPU
	// (cutime + cstime) grew by their whole lifetime, from which what they
	// had used by the start of the round is taken off. A backend does not
	// say whose it was once it is gone, and on a shared Postgres most of
	// these are other clients'.
	reaped time.Duration
	// ownExited counts the target's backends that were alive at the start
	// of the round and gone at its end.
	ownExited int
	// exited is the part of reaped charged to the target: all of it when
	// one of the target's own backends exited during the round (an upper
	// bound: the others' that exited in the same round are in it too),
	// nothing otherwise.
	exited time.Duration
	// background is the CPU time of Postgres's own processes (walwriter,
	// checkpointer, background writer, autovacuum, …) during the round.
	background time.Duration
	wal        uint64 // bytes of WAL written, by anyone
}

func (r *pgRound) add(o pgRound) {
	r.own += o.own
	r.reaped += o.reaped
	r.ownExited += o.ownExited
	r.exited += o.exited
	r.background += o.background
	r.wal += o.wal
}

func (m *pgMonitor) round(before, after pgSnapshot, app string) pgRound {
	var r pgRound
	if after.lsn > before.lsn {
		r.wal = after.lsn - before.lsn
	}
	if !m.local() {
		return r
	}
	for pid, b := range after.backends {
		if b.background {
			r.background += b.cpu - before.backends[pid].cpu
			continue
		}
		if app != "" && b.app == app {
			r.own += b.cpu - before.backends[pid].cpu
		}
	}
	r.reaped = after.reaped - before.reaped
	for pid, b := range before.backends {
		if _, alive := after.backends[pid]; !alive {
			r.reaped -= b.cpu
			if app != "" && b.app == app {
				r.ownExited++
			}
		}
	}
	// A backend that exited after the snapshot's query listed it but before
	// its /proc entry was read is missing from both sides; clock ticks
	// cannot go negative otherwise.
	r.reaped = max(r.reaped, 0)
	if r.ownExited > 0 {
		r.exited = r.reaped
	}
	return r
}

// parseLSN parses a pg_lsn's text form, two hexadecimal halves: "16/B374D848".
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("pg_current_wal_lsn() answered %q, not an LSN", s)
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("pg_current_wal_lsn() answered %q, not an LSN", s)
	}
	return h<<32 | l, nil
}
