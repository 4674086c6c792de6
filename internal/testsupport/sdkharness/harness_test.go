//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemhq/idem/client"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/internal/testsupport/fixedport"
	"github.com/idemhq/idem/internal/testsupport/sdkharness/drive"
	"github.com/idemhq/idem/internal/testsupport/testdb"
)

var bins drive.Binaries

func TestMain(m *testing.M) {
	var err error
	if bins, err = drive.BuildRace(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestHarness checks, on each store, what the scenarios rely on: the
// tenants and their tokens, the hold policy, the JSON API, the control
// endpoints, and that the harness leaves nothing behind.
func TestHarness(t *testing.T) {
	for _, store := range []string{storePostgres, storeSQLite} {
		t.Run(store, func(t *testing.T) {
			h, err := drive.StartProcess(bins, store)
			if err != nil {
				t.Fatal(err)
			}
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					_ = h.Stop(time.Minute)
				}
				if t.Failed() {
					t.Logf("harness stderr:\n%s", h.Stderr())
				}
			})
			in := h.Info
			// idemd keeps its addresses across restarts: none may be in
			// the range outgoing connections take their ports from.
			for _, addr := range []string{in.GRPCAddr, strings.TrimPrefix(in.HTTPURL, "http://")} {
				_, p, _ := net.SplitHostPort(addr)
				if port, err := strconv.Atoi(p); err != nil || port >= fixedport.EphemeralLow() {
					t.Fatalf("idemd listens on %s; want a port below the ephemeral range (%d and up)", addr, fixedport.EphemeralLow())
				}
			}
			if in.Store != store || in.Namespaces.Plain != namespacePlain || in.Namespaces.Held != namespaceHeld {
				t.Fatalf("line = %+v; want store %s and namespaces %s, %s", in, store, namespacePlain, namespaceHeld)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			worker := dial(t, in, in.Tokens[tenantWorker])

			// worker: claims and completes; the held namespace holds.
			res, err := worker.Claim(ctx, client.ClaimRequest{Namespace: in.Namespaces.Plain, Key: "k1"})
			if err != nil || res.Outcome != client.OutcomeAcquired {
				t.Fatalf("worker Claim = %v, %v; want ACQUIRED", res.Outcome, err)
			}
			if _, err := worker.Complete(ctx, client.CompleteRequest{Namespace: in.Namespaces.Plain, Key: "k1", Token: res.Record.Token, Result: []byte("r1")}); err != nil {
				t.Fatalf("worker Complete: %v", err)
			}
			held, err := worker.Claim(ctx, client.ClaimRequest{Namespace: in.Namespaces.Held, Key: "k1"})
			if err != nil || !held.Record.Hold || held.Record.Policy != heldGlob {
				t.Fatalf("held Claim = %+v, %v; want a record held under policy %s", held.Record, err, heldGlob)
			}
			plain, _ := worker.Lookup(ctx, client.LookupRequest{Namespace: in.Namespaces.Plain, Key: "k1"})
			if plain.Hold {
				t.Fatalf("plain record = %+v; want it not held", plain)
			}

			// worker is no admin; operator reaches worker's records.
			if _, err := worker.AdminService().Stats(ctx, &idemv1.StatsRequest{}); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("worker Stats: %v; want PERMISSION_DENIED", err)
			}
			operator := dial(t, in, in.Tokens[tenantOperator])
			if _, err := operator.AdminService().DeleteRecord(ctx, &idemv1.DeleteRecordRequest{Tenant: tenantWorker, Namespace: in.Namespaces.Held, Key: "k1"}); err != nil {
				t.Fatalf("operator DeleteRecord of worker's record: %v", err)
			}

			// limited: burst 1, so a second call at once is refused.
			limited := dial(t, in, in.Tokens[tenantLimited])
			var refused error
			for i := 0; i < 5 && refused == nil; i++ {
				_, refused = limited.Lookup(ctx, client.LookupRequest{Namespace: in.Namespaces.Plain, Key: "k1"})
				if refused != nil && client.Reason(refused) == "NOT_FOUND" {
					refused = nil // the limited tenant sees none of worker's records
				}
			}
			if status.Code(refused) != codes.ResourceExhausted || client.Reason(refused) != "RATE_LIMITED" {
				t.Fatalf("limited tenant's calls in a row: %v; want RESOURCE_EXHAUSTED/RATE_LIMITED", refused)
			}

			// The JSON API, with the worker's token.
			if code, body := postJSON(t, in.HTTPURL+"/idem.v1.IdempotencyService/Lookup", in.Tokens[tenantWorker],
				`{"namespace":"jobs","key":"k1"}`); code != http.StatusOK || !strings.Contains(body, "STATE_COMPLETED") {
				t.Fatalf("JSON Lookup: %d %s; want 200 and the COMPLETED record", code, body)
			}

			// /unavailable: the store answers UNAVAILABLE, then /ready waits
			// until it is back. The window is long enough for one RPC on
			// a busy machine.
			if err := h.Control("/unavailable?ms=4000"); err != nil {
				t.Fatal(err)
			}
			_, err = worker.Lookup(ctx, client.LookupRequest{Namespace: in.Namespaces.Plain, Key: "k1"})
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("Lookup while the store is unavailable: %v; want UNAVAILABLE", err)
			}
			if store == storePostgres && client.Reason(err) != "STORE_UNAVAILABLE" {
				t.Fatalf("Lookup while the proxy is cut: %v; want reason STORE_UNAVAILABLE", err)
			}
			if err := h.Control("/ready"); err != nil {
				t.Fatal(err)
			}
			// The client's connection may still be backing off from the
			// refused dials; idemd is ready, so waiting for the connection
			// is waiting for gRPC's redial, not for idemd.
			if _, err := worker.Lookup(ctx, client.LookupRequest{Namespace: in.Namespaces.Plain, Key: "k1"}, grpc.WaitForReady(true)); err != nil {
				t.Fatalf("Lookup after /ready: %v", err)
			}

			// /restart: idemd is down when it answers, back (on the same
			// port, with the same records) after /ready.
			idemd := childrenOf(h.Pid())
			if len(idemd) != 1 {
				t.Fatalf("the harness has children %v; want one idemd", idemd)
			}
			if err := h.Control("/restart?down_ms=3000"); err != nil {
				t.Fatal(err)
			}
			if c, err := net.DialTimeout("tcp", in.GRPCAddr, time.Second); err == nil {
				c.Close()
				t.Fatalf("idemd still listens on %s after /restart answered", in.GRPCAddr)
			}
			if alive(idemd[0]) {
				t.Fatalf("idemd %d still runs after /restart answered", idemd[0])
			}
			if err := h.Control("/ready"); err != nil {
				t.Fatal(err)
			}
			rec, err := worker.Lookup(ctx, client.LookupRequest{Namespace: in.Namespaces.Plain, Key: "k1"}, grpc.WaitForReady(true))
			if err != nil || string(rec.Result) != "r1" {
				t.Fatalf("Lookup after the restart = %q, %v; want the stored r1", rec.Result, err)
			}
			if err := h.Control("/restart?down_ms=-1"); err == nil || !strings.Contains(err.Error(), "400") {
				t.Fatalf("/restart?down_ms=-1: %v; want 400", err)
			}

			// Stdin closed: the harness exits 0, and idemd, the schema and
			// the directory are gone.
			idemd = childrenOf(h.Pid())
			stopped = true
			if err := h.Stop(time.Minute); err != nil {
				t.Fatal(err)
			}
			checkGone(t, in, idemd)
		})
	}
}

// TestHarnessSignals checks that SIGTERM stops the harness cleanly, and
// that idemd does not outlive a harness killed outright.
func TestHarnessSignals(t *testing.T) {
	h, err := drive.StartProcess(bins, storeSQLite)
	if err != nil {
		t.Fatal(err)
	}
	idemd := childrenOf(h.Pid())
	if err := syscall.Kill(h.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Exited():
	case <-time.After(time.Minute):
		t.Fatal("the harness did not exit within a minute of SIGTERM")
	}
	if err := h.Stop(time.Second); err != nil {
		t.Fatalf("after SIGTERM: %v; stderr:\n%s", err, h.Stderr())
	}
	checkGone(t, h.Info, idemd)

	h, err = drive.StartProcess(bins, storeSQLite)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(h.Info.TempDir) // a killed harness cannot remove it
	idemd = childrenOf(h.Pid())
	if len(idemd) != 1 {
		t.Fatalf("the harness has children %v; want one idemd", idemd)
	}
	if err := syscall.Kill(h.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-h.Exited()
	for deadline := time.Now().Add(time.Minute); alive(idemd[0]); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(idemd[0], syscall.SIGKILL)
			t.Fatalf("idemd %d outlived its harness by a minute", idemd[0])
		}
	}
}

// TestHarnessRefusesBadFlags checks that a wrong --store is refused with a
// message naming the flag.
func TestHarnessRefusesBadFlags(t *testing.T) {
	out, err := exec.Command(bins.Harness, "--store", "mysql").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--store is \"mysql\"; it must be postgres or sqlite") {
		t.Fatalf("--store mysql: %v, %q; want a refusal naming --store", err, out)
	}
}

func dial(t *testing.T, in drive.Info, token string) *client.Client {
	t.Helper()
	c, err := client.New(in.GRPCAddr, client.WithInsecure(), client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func postJSON(t *testing.T, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// checkGone fails t unless the processes, the schema and the directory of
// a stopped harness are gone.
func checkGone(t *testing.T, in drive.Info, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("idemd %d still runs after the harness exited", pid)
		}
	}
	if _, err := os.Stat(in.TempDir); !os.IsNotExist(err) {
		t.Errorf("the harness's directory %s is still there (%v)", in.TempDir, err)
	}
	if in.Schema == "" {
		return
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.BaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", in.Schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("schema %s is still there after the harness exited", in.Schema)
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) >= 2 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, p)
		}
	}
	return kids
}

// alive reports whether pid is a process that has not exited (a zombie has).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	return !strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "Z")
}
