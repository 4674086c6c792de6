package main

import (
	"strings"
	"testing"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
	"github.com/idemhq/idem/server/services"
)

// The tokens of timelineServer's tenants: carol's names her.
const (
	carolToken   = "idem_cli-test-root-carol"
	workersToken = "idem_cli-test-workers"
)

// TestLookupHistory: lookup --history shows who resolved a held record and
// why, resolve takes --reason and --lease-token, delete --reason, and an
// operator's lookup --tenant shows a deleted record's timeline.
func TestLookupHistory(t *testing.T) {
	t.Parallel()
	tenants, err := services.NewTenants(&config.File{Tenants: []config.Tenant{
		{Name: "root", NamedTokens: []config.NamedToken{{Name: "carol", Token: config.HashToken(carolToken)}}, Operator: true},
		{Name: "workers", Tokens: []string{config.HashToken(workersToken)}, Admin: true,
			Policies: []config.Policy{{Namespaces: []string{"held.*"}, OnLeaseExpiry: config.OnLeaseExpiryHold}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, srv: testserver.StartWith(t, testserver.Options{Config: server.Config{Tenants: tenants}})}
	token := f.claim("held.pay", "k", "--token", workersToken, "--claimant", "w1")
	if _, err := f.srv.DB.Pool.Exec(t.Context(), `UPDATE idem_records SET lease_expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	f.idem("--token", workersToken, "claim", "-n", "held.pay", "-k", "k").must(t, int(exitUnresolved), "claim of the lapsed lease")

	resolve := []string{"--token", carolToken, "resolve", "--tenant", "workers", "-n", "held.pay", "-k", "k", "--release", "--reason", "no charge found"}
	f.idem(append(resolve, "--lease-token", token+"0")...).must(t, int(exitLeaseLost), "resolve --lease-token of another lease")
	f.idem(append(resolve, "--lease-token", token)...).must(t, 0, "resolve --reason --lease-token")

	r := f.idem("--token", workersToken, "lookup", "-n", "held.pay", "-k", "k", "--history").must(t, 0, "lookup --history")
	for _, want := range []string{"state             RELEASED", "AT", "WHAT", "held", `the lease of claimant "w1" ran out under a hold policy`,
		"resolved RELEASED", `by carol of tenant root; reason "no charge found"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("lookup --history lacks %q:\n%s", want, r.stdout)
		}
	}
	r = f.idem("--token", workersToken, "-o", "json", "lookup", "-n", "held.pay", "-k", "k", "--history").must(t, 0, "lookup --history -o json")
	var look idemv1.LookupResponse
	parseJSON(t, r.stdout, &look)
	if len(look.GetHistory()) != 2 || look.GetHistory()[1].GetActor().GetOperator() != "carol" {
		t.Errorf("lookup --history -o json: %s", r.stdout)
	}
	r = f.idem("--token", workersToken, "lookup", "-n", "held.pay", "-k", "k").must(t, 0, "lookup")
	if strings.Contains(r.stdout, "WHAT") {
		t.Errorf("lookup without --history shows a timeline:\n%s", r.stdout)
	}

	f.idem("--token", carolToken, "delete", "--tenant", "workers", "-n", "held.pay", "-k", "k", "--reason", "test data").must(t, 0, "delete --reason")
	r = f.idem("--token", carolToken, "lookup", "--tenant", "workers", "-n", "held.pay", "-k", "k", "--history").must(t, int(exitNotFound), "lookup --tenant of a deleted record")
	for _, want := range []string{"held.pay/k has no record now: it was deleted", "resolved RELEASED",
		`deleted`, `in state RELEASED by carol of tenant root; reason "test data"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("lookup --tenant --history of a deleted record lacks %q:\n%s", want, r.stdout)
		}
	}
	f.idem("--token", carolToken, "lookup", "--tenant", "workers", "-n", "held.pay", "-k", "k").must(t, int(exitNotFound), "lookup --tenant without --history")
	f.idem("--token", workersToken, "lookup", "--tenant", "root", "-n", "held.pay", "-k", "k").must(t, int(exitDenied), "lookup --tenant by a tenant that is no operator")
}
