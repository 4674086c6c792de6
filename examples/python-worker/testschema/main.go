// Command testschema creates and drops the PostgreSQL schemas that the
// Python worker's tests run idemd on. Python's standard library has no
// PostgreSQL client, and the tests use nothing else, so this small Go
// command does the two statements they need.
//
//	testschema create        prints the URL of a new, empty schema
//	testschema drop URL      drops the schema that URL's search_path names
//
// The database is IDEM_TEST_DATABASE_URL, as for the Go tests (default: the
// local Postgres on 127.0.0.1:5432). idemd migrates the schema itself when it
// starts.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
)

const defaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// schemaName is what create makes and the only thing drop drops.
var schemaName = regexp.MustCompile(`^idem_python_test_[0-9a-f]{12}$`)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testschema:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	base := os.Getenv("IDEM_TEST_DATABASE_URL")
	if base == "" {
		base = defaultURL
	}
	switch {
	case len(args) == 1 && args[0] == "create":
		var buf [6]byte
		if _, err := rand.Read(buf[:]); err != nil {
			return err
		}
		schema := "idem_python_test_" + hex.EncodeToString(buf[:])
		if err := exec(base, "CREATE SCHEMA "+schema); err != nil {
			return err
		}
		u, err := withSearchPath(base, schema)
		if err != nil {
			return err
		}
		fmt.Println(u)
		return nil
	case len(args) == 2 && args[0] == "drop":
		u, err := url.Parse(args[1])
		if err != nil {
			return fmt.Errorf("drop: %w", err)
		}
		schema := u.Query().Get("search_path")
		if !schemaName.MatchString(schema) {
			return fmt.Errorf("drop: %q is not a schema that testschema created", schema)
		}
		return exec(base, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	default:
		return fmt.Errorf("usage: testschema create | testschema drop URL")
	}
}

// exec runs one statement on base.
func exec(base, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("the Python worker tests need PostgreSQL and none answers at %s: %v\n"+
			"Start one (on Debian: pg_ctlcluster 15 main start), point IDEM_TEST_DATABASE_URL at one, "+
			"or run the tests with `make test-python`, which finds or starts one", redact(base), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// withSearchPath returns base with its search_path set to schema.
func withSearchPath(base, schema string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// redact hides the password of a database URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}
