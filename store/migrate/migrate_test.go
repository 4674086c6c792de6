package migrate_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/idemhq/idem/store/migrate"
)

// recorder is a migrate.Tx over a slice: what the runner decides does not
// depend on a database, and each store's own tests run it on theirs.
type recorder struct {
	current int
	applied []string
}

func (r *recorder) Version(context.Context) (int, error) { return r.current, nil }

func (r *recorder) Apply(_ context.Context, m migrate.Migration) error {
	if strings.Contains(m.SQL, "FAIL") {
		return errors.New("syntax error")
	}
	r.applied = append(r.applied, m.Name)
	return nil
}

func files(names ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for _, n := range names {
		fsys["migrations/"+n] = &fstest.MapFile{Data: []byte("-- " + n)}
	}
	return fsys
}

func TestUpAppliesWhatIsPendingInOrder(t *testing.T) {
	t.Parallel()
	ms, err := migrate.Dir(files("010_c.sql", "002_b.sql", "001_a.sql"), "migrations").Migrations()
	if err != nil {
		t.Fatal(err)
	}
	tx := &recorder{current: 1}
	applied, err := migrate.Up(t.Context(), tx, ms, migrate.RefuseNewer, slog.Default())
	if err != nil || !slices.Equal(applied, []int{2, 10}) || !slices.Equal(tx.applied, []string{"002_b.sql", "010_c.sql"}) {
		t.Fatalf("Up from version 1: %v (%v), ran %v; want [2 10] in order", applied, err, tx.applied)
	}
}

func TestUpNewerSchema(t *testing.T) {
	t.Parallel()
	ms, err := migrate.Dir(files("001_a.sql"), "migrations").Migrations()
	if err != nil {
		t.Fatal(err)
	}
	_, err = migrate.Up(t.Context(), &recorder{current: 7}, ms, migrate.RefuseNewer, slog.Default())
	var newer *migrate.NewerSchemaError
	if !errors.As(err, &newer) || newer.Schema != 7 || newer.Binary != 1 || !strings.Contains(err.Error(), "version 7") {
		t.Fatalf("RefuseNewer on schema 7 with migrations up to 1: %v; want a NewerSchemaError naming 7", err)
	}

	var log bytes.Buffer
	tx := &recorder{current: 7}
	applied, err := migrate.Up(t.Context(), tx, ms, migrate.WarnNewer, slog.New(slog.NewTextHandler(&log, nil)))
	if err != nil || len(applied) != 0 || len(tx.applied) != 0 {
		t.Fatalf("WarnNewer: %v, %v, ran %v; want nothing and no error", applied, err, tx.applied)
	}
	if !strings.Contains(log.String(), "level=WARN") || !strings.Contains(log.String(), "schema_version=7") {
		t.Fatalf("WarnNewer logged %q; want a warning with the schema's version", log.String())
	}
}

func TestUpStopsAtAFailingMigration(t *testing.T) {
	t.Parallel()
	fsys := files("001_a.sql", "003_c.sql")
	fsys["migrations/002_b.sql"] = &fstest.MapFile{Data: []byte("FAIL")}
	ms, err := migrate.Dir(fsys, "migrations").Migrations()
	if err != nil {
		t.Fatal(err)
	}
	tx := &recorder{}
	if _, err := migrate.Up(t.Context(), tx, ms, migrate.RefuseNewer, slog.Default()); err == nil || !strings.Contains(err.Error(), "002_b.sql") {
		t.Fatalf("Up over a failing migration: %v; want an error naming 002_b.sql", err)
	}
	if !slices.Equal(tx.applied, []string{"001_a.sql"}) {
		t.Fatalf("ran %v; want to stop after 001_a.sql", tx.applied)
	}
}

func TestParseRefusesBadNames(t *testing.T) {
	t.Parallel()
	for _, fsys := range []fstest.MapFS{
		files("001_a.sql", "001_b.sql"),
		files("a_first.sql"),
		files("001_a.txt"),
		files("001.sql"),
	} {
		if ms, err := migrate.Dir(fsys, "migrations").Migrations(); err == nil {
			t.Errorf("Migrations of %v: %v, no error", fsys, ms)
		}
	}
	if v := migrate.Dir(files(), "no-such-dir").Latest(); v != 0 {
		t.Errorf("Latest of a missing directory: %d, want 0", v)
	}
}
