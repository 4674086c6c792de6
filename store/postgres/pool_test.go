package postgres_test

import (
	"net/url"
	"testing"

	"github.com/idemhq/idem/internal/testsupport/testdb"
	"github.com/idemhq/idem/store/postgres"
)

// TestConnectPoolSize: Connect sizes the pool with DefaultMaxConns unless the
// URL sets pool_max_conns, which wins.
func TestConnectPoolSize(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	withMax, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := withMax.Query()
	q.Set("pool_max_conns", "3")
	withMax.RawQuery = q.Encode()

	for _, tc := range []struct {
		url  string
		want int32
	}{
		{db.URL, postgres.DefaultMaxConns()},
		{withMax.String(), 3},
	} {
		pool, err := postgres.Connect(t.Context(), tc.url)
		if err != nil {
			t.Fatalf("Connect(%s): %v", tc.url, err)
		}
		got := pool.Config().MaxConns
		pool.Close()
		if got != tc.want {
			t.Errorf("Connect(%s): pool of %d, want %d", tc.url, got, tc.want)
		}
	}
	if n := postgres.DefaultMaxConns(); n < 16 {
		t.Errorf("DefaultMaxConns() = %d, want at least 16", n)
	}
}
