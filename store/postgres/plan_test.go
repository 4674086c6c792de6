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
