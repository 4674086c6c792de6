package postgres_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store/postgres"
)

// TestHotStatementPlansUseThePrimaryKey: the statements workers' calls send
// are prepared and run on generic plans (Connect), planned once per
// connection with the statistics of that moment. On a new deployment that
// moment is an empty table, which Postgres takes for ten pages: a statement
// that joined the batch's arrays to idem_records got a hash join over a
// sequential scan of the whole table there, kept it while the table grew,
// and made every batch read every record (throughput fell by half within
// 25,000 records). Each statement's generic plan, made on an empty table,
// must reach idem_records only through lookups of its primary key.
func TestHotStatementPlansUseThePrimaryKey(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := t.Context()
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	for i, st := range postgres.HotStatements() {
		name := fmt.Sprintf("hot_%d", i)
		if _, err := conn.Exec(ctx, "PREPARE "+name+" AS "+st.SQL); err != nil {
			t.Fatalf("%s: PREPARE: %v", st.Name, err)
		}
		var out []byte
		if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE "+name+"("+st.Args+")").Scan(&out); err != nil {
			t.Fatalf("%s: EXPLAIN: %v", st.Name, err)
		}
		var plans []struct{ Plan planNode }
		if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
			t.Fatalf("%s: EXPLAIN output %s: %v", st.Name, out, err)
		}
		var bad []string
		plans[0].Plan.walk(func(n *planNode) {
			if n.Relation != "idem_records" || n.NodeType == "ModifyTable" {
				return
			}
			// A row found by its primary key earlier in the statement may
			// be reached again by its address.
			if n.NodeType == "Tid Scan" && n.TIDCond != "" {
				return
			}
			if (n.NodeType != "Index Scan" && n.NodeType != "Index Only Scan") || n.IndexName != "idem_records_pkey" || n.IndexCond == "" {
				bad = append(bad, fmt.Sprintf("%s (index %q, condition %q)", n.NodeType, n.IndexName, n.IndexCond))
			}
		})
		if len(bad) > 0 {
			t.Errorf("%s: the generic plan on an empty table reads idem_records by %s; want only primary-key lookups. Plan:\n%s",
				st.Name, strings.Join(bad, ", "), out)
		}
	}
}

// planNode is the part of a node of EXPLAIN (FORMAT JSON) the test reads.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	IndexName string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	TIDCond   string     `json:"TID Cond"`
	Plans     []planNode `json:"Plans"`
}

func (n *planNode) walk(f func(*planNode)) {
	f(n)
	for i := range n.Plans {
		n.Plans[i].walk(f)
	}
}

// TestOrdinaryPathLeavesTheTimeline: the statements of the ordinary path (a
// Claim, a Complete, a Heartbeat, a Lookup, a waiting Claim's mark, one row
// or many) do not touch the timeline, so that a job without exceptions costs
// what it cost before timelines; the statements of the exceptions write it.
func TestOrdinaryPathLeavesTheTimeline(t *testing.T) {
	t.Parallel()
	exceptions := map[string]bool{"takeover": true, "hold": true, "fail": true, "fail batch": true,
		"resolve": true, "delete": true, "fingerprint mismatch": true}
	for _, st := range postgres.HotStatements() {
		if writes := strings.Contains(st.SQL, "INSERT INTO idem_timeline"); writes != exceptions[st.Name] {
			t.Errorf("%s: writes the timeline: %v, want %v", st.Name, writes, exceptions[st.Name])
		}
		if !exceptions[st.Name] && strings.Contains(st.SQL, "idem_timeline") {
			t.Errorf("%s: names idem_timeline; the ordinary path must not touch it:\n%s", st.Name, st.SQL)
		}
	}
}

// TestListHeldUsesThePurgeIndex: a listing of a tenant's held records reads
// the few UNRESOLVED records through the purge's partial index (the only
// records there without an expires_at), not the tenant's every record in
// key order, on a table whose statistics show them to be few.
func TestListHeldUsesThePurgeIndex(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := t.Context()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO idem_records (tenant, namespace, key, state, token, attempt, retention,
			created_at, updated_at, expires_at, lease_expires_at)
		SELECT 'acme', 'ns' || (i % 7), 'k' || i,
			CASE WHEN i % 2000 = 0 THEN 'unresolved' WHEN i % 5 = 0 THEN 'processing' ELSE 'completed' END,
			i, 1, interval '1 day', now(), now(),
			CASE WHEN i % 2000 = 0 OR i % 5 = 0 THEN NULL ELSE now() + interval '1 day' END,
			CASE WHEN i % 5 = 0 THEN now() + interval '5 minutes' END
		FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "ANALYZE idem_records"); err != nil {
		t.Fatal(err)
	}
	sql := strings.NewReplacer("$1", "'acme'", "$2", "''", "$3", "''", "$4", "100").Replace(postgres.ListHeldSQL)
	var out []byte
	if err := db.Pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", out, err)
	}
	var scans []string
	plans[0].Plan.walk(func(n *planNode) {
		if n.Relation == "idem_records" {
			scans = append(scans, n.NodeType+" "+n.IndexName)
		}
	})
	if len(scans) != 1 || !strings.HasSuffix(scans[0], "idem_records_purge_due") {
		t.Fatalf("the held listing reads idem_records by %v; want the purge's partial index. Plan:\n%s", scans, out)
	}
}
