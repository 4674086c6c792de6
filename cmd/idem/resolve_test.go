package main

import (
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/config"
	"github.com/idemhq/idem/internal/testsupport/testserver"
	"github.com/idemhq/idem/server"
)

// TestResolveUnresolved: a held lease that ran out shows in list --state
// unresolved with its policy, and resolve --completed makes later claims
// replay the result.
func TestResolveUnresolved(t *testing.T) {
	t.Parallel()
	srv := testserver.StartWith(t, testserver.Options{Config: server.Config{Policies: []config.Policy{
		{Namespaces: []string{"held.*"}, OnLeaseExpiry: config.OnLeaseExpiryHold},
	}}})
	idem := func(args ...string) result {
		return runIdem(t, runOpts{}, append([]string{"--addr", srv.Addr}, args...)...)
	}
	idem("claim", "-n", "held.pay", "-k", "k", "--lease-ttl", "1s").must(t, 0, "claim")
	time.Sleep(1100 * time.Millisecond)
	idem("claim", "-n", "held.pay", "-k", "k").must(t, int(exitUnresolved), "claim of the lapsed lease")

	list := idem("list", "--state", "unresolved")
	list.must(t, 0, "list")
	if !strings.Contains(list.stdout, "UNRESOLVED") || !strings.Contains(list.stdout, "held.* (hold)") {
		t.Errorf("list --state unresolved:\n%s\nwant the record with its policy", list.stdout)
	}
	idem("resolve", "-n", "held.pay", "-k", "k", "--failed").must(t, int(exitError), "resolve --failed without --error")
	idem("resolve", "-n", "held.pay", "-k", "k", "--completed", "--result", "by hand").must(t, 0, "resolve")
	replay := idem("claim", "-n", "held.pay", "-k", "k", "--result-out", "-")
	replay.must(t, int(exitCompleted), "claim after resolve")
	if replay.stdout != "by hand" {
		t.Errorf("replayed result %q; want %q", replay.stdout, "by hand")
	}
	idem("list", "--state", "unresolved").must(t, 0, "list")
}
