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

// The tokens of operatorServer's tenants.
const (
	rootToken  = "idem_cli-test-root-token"
	teamAToken = "idem_cli-test-team-a-token"
	teamBToken = "idem_cli-test-team-b-token"
)

// operatorServer starts a server with an operator, root, and two admin
// tenants, team-a and team-b.
func operatorServer(t *testing.T) *fixture {
	t.Helper()
	tenants, err := services.NewTenants(&config.File{Tenants: []config.Tenant{
		{Name: "root", Tokens: []string{config.HashToken(rootToken)}, Operator: true},
		{Name: "team-a", Tokens: []string{config.HashToken(teamAToken)}, Admin: true},
		{Name: "team-b", Tokens: []string{config.HashToken(teamBToken)}, Admin: true},
	}})
	if err != nil {
		t.Fatalf("NewTenants: %v", err)
	}
	return &fixture{t: t, srv: testserver.StartWith(t, testserver.Options{Config: server.Config{Tenants: tenants}})}
}

// TestOperatorFlags: --tenant and --all-tenants on list, stats and delete
// reach other tenants for an operator, with a TENANT column, and are exit
// 18 for an admin tenant.
func TestOperatorFlags(t *testing.T) {
	t.Parallel()
	f := operatorServer(t)
	f.claim("jobs", "a1", "--token", teamAToken)
	f.claim("jobs", "a2", "--token", teamAToken)
	f.claim("mail", "b1", "--token", teamBToken)

	r := f.idem("--token", rootToken, "list", "--all-tenants").must(t, 0, "list --all-tenants")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "TENANT  NAMESPACE  KEY") ||
		!strings.HasPrefix(lines[1], "team-a  jobs       a1") || !strings.HasPrefix(lines[3], "team-b  mail       b1") {
		t.Errorf("list --all-tenants:\n%s", r.stdout)
	}
	r = f.idem("--token", rootToken, "-o", "json", "list", "--tenant", "team-b").must(t, 0, "list --tenant")
	var page idemv1.ListRecordsResponse
	parseJSON(t, r.stdout, &page)
	if len(page.GetRecords()) != 1 || page.GetRecords()[0].GetTenant() != "team-b" {
		t.Errorf("list --tenant team-b -o json: %s", r.stdout)
	}
	r = f.idem("--token", rootToken, "stats", "--all-tenants").must(t, 0, "stats --all-tenants")
	if want := "TENANT  NAMESPACE  STATE       COUNT\nteam-a  jobs       PROCESSING  2\nteam-b  mail       PROCESSING  1\n"; r.stdout != want {
		t.Errorf("stats --all-tenants:\n%s\nwant:\n%s", r.stdout, want)
	}
	r = f.idem("--token", rootToken, "delete", "--tenant", "team-a", "-n", "jobs", "-k", "a1").must(t, 0, "delete --tenant")
	if !strings.Contains(r.stderr, "deleted jobs/a1 of tenant team-a; it was PROCESSING") {
		t.Errorf("delete --tenant: stderr %q", r.stderr)
	}
	f.idem("--token", teamAToken, "lookup", "-n", "jobs", "-k", "a1").must(t, int(exitNotFound), "lookup of the deleted record")

	// An admin tenant may not; its own records need no flag.
	for _, args := range [][]string{
		{"list", "--all-tenants"},
		{"stats", "--tenant", "team-b"},
		{"delete", "--tenant", "team-b", "-n", "mail", "-k", "b1"},
	} {
		r := f.idem(append([]string{"--token", teamAToken}, args...)...).must(t, int(exitDenied), strings.Join(args, " "))
		if !strings.Contains(r.stderr, "operator: true") {
			t.Errorf("%v: stderr %q; want it to say what it takes", args, r.stderr)
		}
	}
	r = f.idem("--token", teamAToken, "stats").must(t, 0, "stats of its own")
	if strings.Contains(r.stdout, "TENANT") || !strings.Contains(r.stdout, "jobs       PROCESSING  1") {
		t.Errorf("team-a's own stats:\n%s", r.stdout)
	}
	r = f.idem("--token", rootToken, "list", "--tenant", "team-a", "--all-tenants").must(t, int(exitError), "both flags")
	if !strings.Contains(r.stderr, "--tenant") || !strings.Contains(r.stderr, "--all-tenants") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("--tenant with --all-tenants: stderr %q; want one line naming both", r.stderr)
	}
}
