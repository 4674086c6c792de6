package main

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// TestReplicasShareTheLoad opens the service target with two idemd
// replicas, runs a round of four workers, and checks that workers 0 and 2
// go to the first replica and 1 and 3 to the second, that the replicas
// answered every Claim between them, each some, that the target's
// processes are both replicas, and that closing it drops their one schema.
func TestReplicasShareTheLoad(t *testing.T) {
	t.Parallel()
	var c cli
	parser, err := newParser(&c, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseArgs(parser, smokeArgs(t, "--start-idemd", "--idemd-replicas", "2")); err != nil {
		t.Fatal(err)
	}
	runID := newRunID()
	tg, err := c.open(t.Context(), "service", runID, []byte("r"), &report{}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	st := tg.(*serviceTarget)
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = st.close(context.WithoutCancel(t.Context()))
		}
	})
	if len(st.idemds) != 2 || len(st.clients) != 2 {
		t.Fatalf("%d idemds and %d clients; want 2 of each", len(st.idemds), len(st.clients))
	}
	pids := st.processPIDs()
	if len(pids) != 2 || pids[0] == pids[1] || pids[0] != st.idemds[0].pid() || pids[1] != st.idemds[1].pid() {
		t.Fatalf("processPIDs %v; want both replicas' (%d, %d)", pids, st.idemds[0].pid(), st.idemds[1].pid())
	}
	for i, want := range []int{0, 1, 0, 1, 0} {
		if got := workerTarget(st, i).(*serviceTarget).client; got != st.clients[want] {
			t.Errorf("worker %d uses the client of replica %d's place; want replica %d's", i, slices.Index(st.clients, got), want)
		}
	}

	const jobs = 200
	r := newRunner(4, newProgress(io.Discard, "never", 1, jobs, 0), nil)
	into := newTally("service", scenarioUnique)
	r.round(t.Context(), st, newWorkload(scenarioUnique, runID, 4), 0, jobs, 0, into)
	if into.ops != jobs || into.errors != 0 {
		t.Fatalf("%d jobs, %d errors (%v); want %d and none", into.ops, into.errors, into.firstErr, jobs)
	}
	total := 0.0
	for k, d := range st.idemds {
		n := claims(t, d)
		if n == 0 {
			t.Errorf("replica %d answered no Claim; want those of workers %d and %d", k+1, k, k+2)
		}
		total += n
	}
	if total != jobs {
		t.Errorf("the replicas answered %v Claims in all; want the round's %d", total, jobs)
	}

	schema := st.idemds[0].schema
	closed = true
	if err := st.close(context.WithoutCancel(t.Context())); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), testdb.BaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	var exists bool
	if err := conn.QueryRow(t.Context(), "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("schema %s is still there after the target closed", schema)
	}
}

// claims is the Claims idemd has answered, from its idem_claims_total.
func claims(t *testing.T, d *localIdemd) float64 {
	t.Helper()
	var b strings.Builder
	if err := d.get(t.Context(), "/metrics", &b); err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for line := range strings.Lines(b.String()) {
		if !strings.HasPrefix(line, "idem_claims_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		n += v
	}
	return n
}

// TestReplicasReport runs the Postgres targets with two replicas each (and
// service-sqlite with its one) and checks the report says so and counts
// every job.
func TestReplicasReport(t *testing.T) {
	t.Parallel()
	args := smokeArgs(t, "--start-idemd", "--idemd-replicas", "2", "--idemd-bin-b", idemdBinary,
		"--target", "service,service-b,service-sqlite", "--scenario", "unique,batch", "--batch-size", "5")
	stdout, _ := runBench(t, append(args, "--json"))
	var raw struct {
		IdemdReplicas int              `json:"idemd_replicas"`
		Results       []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	if raw.IdemdReplicas != 2 || len(raw.Results) != 6 {
		t.Fatalf("idemd_replicas %d and %d results; want 2 and 6:\n%s", raw.IdemdReplicas, len(raw.Results), stdout)
	}
	for _, res := range raw.Results {
		if ops, _ := res["ops"].(float64); ops < 40 || res["errors"].(float64) != 0 {
			t.Errorf("%v/%v: ops %v, errors %v (%v)", res["scenario"], res["target"], res["ops"], res["errors"], res["first_error"])
		}
		if _, ok := res["idemd_cpu_us_per_op"].(float64); !ok {
			t.Errorf("%v/%v: idemd_cpu_us_per_op %v, want a number", res["scenario"], res["target"], res["idemd_cpu_us_per_op"])
		}
	}
	table, _ := runBench(t, smokeArgs(t, "--start-idemd", "--idemd-replicas", "2", "--target", "service", "--scenario", "unique"))
	if !strings.Contains(table, "2 replicas per target on Postgres, worker i on replica i mod 2") {
		t.Errorf("the table does not say the load went to two replicas:\n%s", table)
	}
}
