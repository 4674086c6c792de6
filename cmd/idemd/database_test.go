package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestStoreChoice: which store and which file each --database-url and
// --data-dir choose, without opening anything.
func TestStoreChoice(t *testing.T) {
	t.Parallel()
	ptr := func(s string) *string { return &s }
	cases := []struct {
		name     string
		url      *string
		dataDir  string
		path     string // "" for Postgres
		implicit bool
		err      string
	}{
		{name: "no URL", dataDir: "./idem-data", path: filepath.Join("idem-data", "idem.db"), implicit: true},
		{name: "no URL, another data dir", dataDir: "/var/lib/idem", path: "/var/lib/idem/idem.db", implicit: true},
		{name: "postgres", url: ptr("postgres://u:p@db:5432/idem"), dataDir: "./idem-data"},
		{name: "postgresql", url: ptr("postgresql://db/idem?search_path=idem"), dataDir: "./idem-data"},
		{name: "upper-case scheme", url: ptr("POSTGRES://db/idem"), dataDir: "./idem-data"},
		{name: "keyword/value DSN", url: ptr("host=db dbname=idem"), dataDir: "./idem-data"},
		{name: "sqlite absolute", url: ptr("sqlite:///var/lib/idem/x.db"), path: "/var/lib/idem/x.db"},
		{name: "sqlite relative", url: ptr("sqlite:data/x.db"), path: filepath.Join("data", "x.db")},
		{name: "empty URL", url: ptr(" "), err: "--database-url is empty"},
		{name: "empty data dir", dataDir: "", err: "--data-dir is empty"},
		{name: "sqlite host", url: ptr("sqlite://db/x.db"), err: "names a host"},
		{name: "sqlite parameters", url: ptr("sqlite:///x.db?mode=memory"), err: "takes no parameters"},
		{name: "sqlite directory", url: ptr("sqlite:///var/lib/"), err: "does not name a file"},
		{name: "other scheme", url: ptr("mysql://u:secret@db/idem"), err: `the scheme "mysql"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path, implicit, err := databaseFlags{DatabaseURL: tc.url, DataDir: tc.dataDir}.sqlitePath()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v; want one that says %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Fatalf("the error shows the password: %v", err)
				}
				return
			}
			if err != nil || path != tc.path || implicit != tc.implicit {
				t.Fatalf("got (%q, %v, %v); want (%q, %v, nil)", path, implicit, err, tc.path, tc.implicit)
			}
		})
	}
}
