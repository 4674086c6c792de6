package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemhq/idem/config"
	"github.com/idemhq/idem/internal/testsupport/faultproxy"
	"github.com/idemhq/idem/internal/testsupport/fixedport"
	"github.com/idemhq/idem/internal/testsupport/sdkharness/buildcache"
	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// The stores the harness runs idemd on.
const (
	storePostgres = "postgres"
	storeSQLite   = "sqlite"
)

// The namespaces the scenarios use: one that the default policy covers (a
// lapsed lease is taken over), one that heldGlob holds for resolution, and
// one whose jobs are held only when a step was started and not finished.
const (
	namespacePlain    = "jobs"
	namespaceHeld     = "held-jobs"
	heldGlob          = "held*"
	namespaceStepHeld = "steps-held"
)

// The tenants of the config, by the name the JSON line gives their tokens.
const (
	tenantWorker   = "worker"
	tenantOperator = "operator"
	tenantLimited  = "limited"
)

// maxControlMillis bounds the durations the control endpoints take.
const maxControlMillis = 10 * 60 * 1000

// readyTimeout bounds how long a start of idemd, and /ready, wait for it.
const readyTimeout = 60 * time.Second

type options struct {
	store          string
	idemdBin       string
	maxResultBytes int // idemd's --max-result-bytes; its default when 0
}

// harness is one idemd on one store, and what it needs: the temporary
// directory, the schema and fault proxy on PostgreSQL, and the control
// server.
type harness struct {
	store   string
	log     io.Writer
	dir     string
	tokens  map[string]string
	baseURL string // postgres: the database the schema is in
	schema  string // postgres
	proxy   *faultproxy.Proxy
	idemd   *idemdProcess
	control net.Listener
	server  *http.Server

	// lifecycle is held by whatever stops idemd or cuts it off its store,
	// until idemd serves again, so that the control calls take turns and
	// /ready waits for a restart under way.
	lifecycle chan struct{}
	ctx       context.Context // cancelled by close: ends background restarts
	cancel    context.CancelFunc
	pending   sync.WaitGroup
}

// info is the JSON line the harness prints once idemd serves.
type info struct {
	GRPCAddr   string            `json:"grpc_addr"`
	HTTPURL    string            `json:"http_url"`
	ControlURL string            `json:"control_url"`
	Store      string            `json:"store"`
	Tokens     map[string]string `json:"tokens"`
	Namespaces namespaces        `json:"namespaces"`
	// Schema (postgres) and TempDir are what the harness removes when it
	// exits, for a test that checks it did.
	Schema  string `json:"schema,omitempty"`
	TempDir string `json:"temp_dir"`
}

type namespaces struct {
	Plain    string `json:"plain"`
	Held     string `json:"held"`
	StepHeld string `json:"step_held"`
}

func (h *harness) info() info {
	return info{
		GRPCAddr:   h.idemd.grpcAddr,
		HTTPURL:    "http://" + h.idemd.jsonAddr,
		ControlURL: "http://" + h.control.Addr().String(),
		Store:      h.store,
		Tokens:     h.tokens,
		Namespaces: namespaces{Plain: namespacePlain, Held: namespaceHeld, StepHeld: namespaceStepHeld},
		Schema:     h.schema,
		TempDir:    h.dir,
	}
}

// start sets everything up and returns once idemd serves. On an error it
// has removed what it made.
func start(ctx context.Context, opts options, log io.Writer) (_ *harness, err error) {
	h := &harness{store: opts.store, log: log, lifecycle: make(chan struct{}, 1)}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			err = errors.Join(err, h.close())
		}
	}()
	if h.dir, err = os.MkdirTemp("", "idem-sdkharness-run-"); err != nil {
		return nil, err
	}
	bin := opts.idemdBin
	if bin == "" {
		if bin, err = buildIdemd(log); err != nil {
			return nil, err
		}
	}
	cfgPath, err := h.writeConfig()
	if err != nil {
		return nil, err
	}
	addrs, err := freeAddrs(3)
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--config", cfgPath, "--listen", addrs[0], "--json-listen", addrs[1], "--http-listen", addrs[2],
		"--log-level", "warn", "--shutdown-timeout", "5s"}
	if opts.maxResultBytes != 0 {
		args = append(args, "--max-result-bytes", strconv.Itoa(opts.maxResultBytes))
	}
	switch h.store {
	case storePostgres:
		dbURL, err := h.setUpPostgres(ctx)
		if err != nil {
			return nil, err
		}
		args = append(args, "--database-url", dbURL)
	case storeSQLite:
		args = append(args, "--data-dir", filepath.Join(h.dir, "data"))
	}
	h.idemd = &idemdProcess{bin: bin, args: args, log: log, grpcAddr: addrs[0], jsonAddr: addrs[1], httpAddr: addrs[2]}
	if err := h.idemd.start(ctx); err != nil {
		return nil, err
	}
	if h.control, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	h.server = &http.Server{Handler: h.routes(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = h.server.Serve(h.control) }()
	return h, nil
}

// writeConfig writes idemd's config file with a fresh token per tenant.
func (h *harness) writeConfig() (string, error) {
	h.tokens = map[string]string{}
	for _, name := range []string{tenantWorker, tenantOperator, tenantLimited} {
		token, err := config.NewToken()
		if err != nil {
			return "", err
		}
		h.tokens[name] = token
	}
	held := []config.Policy{
		{Namespaces: []string{heldGlob}, OnLeaseExpiry: config.OnLeaseExpiryHold},
		{Namespaces: []string{namespaceStepHeld}, OnUnfinishedStep: config.OnUnfinishedStepHold},
	}
	file := config.File{Tenants: []config.Tenant{
		{Name: tenantWorker, Tokens: []string{config.HashToken(h.tokens[tenantWorker])}, Policies: held},
		{Name: tenantOperator, Tokens: []string{config.HashToken(h.tokens[tenantOperator])}, Operator: true},
		{Name: tenantLimited, Tokens: []string{config.HashToken(h.tokens[tenantLimited])}, Policies: held,
			RateLimit: &config.RateLimit{PerSecond: 5, Burst: 1}},
	}}
	data, err := yaml.Marshal(&file)
	if err != nil {
		return "", err
	}
	if _, err := config.Parse(data); err != nil {
		return "", fmt.Errorf("the config the harness writes is invalid: %w", err)
	}
	path := filepath.Join(h.dir, "idemd.yaml")
	return path, os.WriteFile(path, data, 0o600)
}

// setUpPostgres makes the schema and the fault proxy in front of its
// database, and returns the URL idemd connects with: through the proxy,
// with a small pool, since every test shares the server's connections.
func (h *harness) setUpPostgres(ctx context.Context) (string, error) {
	base, err := testdb.Acquire()
	if err != nil {
		return "", err
	}
	h.baseURL = base
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("%s: %w", testdb.EnvDatabaseURL, err)
	}
	if u.Query().Get("host") != "" || strings.HasPrefix(u.Host, "/") {
		return "", fmt.Errorf("%s names a Unix socket; the harness needs host:port to put its fault proxy in front of", testdb.EnvDatabaseURL)
	}
	target := u.Host
	if u.Port() == "" {
		host := u.Hostname()
		if host == "" {
			host = "localhost"
		}
		target = net.JoinHostPort(host, "5432")
	}
	schema, schemaURL, err := testdb.CreateSchema(ctx, base)
	if err != nil {
		return "", err
	}
	h.schema = schema
	if h.proxy, err = faultproxy.Start(target); err != nil {
		return "", err
	}
	v, err := url.Parse(schemaURL)
	if err != nil {
		return "", err
	}
	v.Host = h.proxy.Addr()
	q := v.Query()
	q.Set("pool_max_conns", "4")
	v.RawQuery = q.Encode()
	return v.String(), nil
}

// close stops idemd and removes everything start made.
func (h *harness) close() error {
	h.cancel()
	var errs []error
	if h.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := h.server.Shutdown(ctx); err != nil {
			_ = h.server.Close()
		}
		cancel()
	}
	h.pending.Wait()
	if h.idemd != nil {
		if err := h.idemd.stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if h.proxy != nil {
		h.proxy.Close()
	}
	if h.schema != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := testdb.DropSchema(ctx, h.baseURL, h.schema); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if h.dir != "" {
		if err := os.RemoveAll(h.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// buildIdemd builds ./cmd/idemd of the idem module that holds the working
// directory, into the checkout's build cache.
func buildIdemd(log io.Writer) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(log, "sdkharness: building idemd from %s\n", root)
	return buildcache.Binary(root, "./cmd/idemd", "idemd")
}

// idemModule is the module whose idemd the harness builds.
const idemModule = "github.com/idemhq/idem"

// moduleRoot finds the directory of idem's go.mod at or above the working
// directory.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if modulePath(filepath.Join(dir, "go.mod")) == idemModule {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("%s is not inside the %s module, so there is no idemd to build: run the harness there or pass --idemd-bin", wd, idemModule)
		}
	}
}

// modulePath reads the module line of a go.mod; "" when there is none.
func modulePath(gomod string) string {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// freeAddrs returns n distinct free loopback addresses, below the system's
// ephemeral range (fixedport): idemd binds them a moment later and keeps
// them across restarts, so no outgoing connection may take one while it is
// down (a Node or Python client reconnecting to it would connect to
// itself).
func freeAddrs(n int) ([]string, error) {
	var addrs []string
	for len(addrs) < n {
		addr, err := fixedport.Addr()
		if err != nil {
			return nil, err
		}
		if !slices.Contains(addrs, addr) {
			addrs = append(addrs, addr)
		}
	}
	return addrs, nil
}

// routes are the control endpoints.
func (h *harness) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /restart", h.restart)
	mux.HandleFunc("POST /unavailable", h.unavailable)
	mux.HandleFunc("POST /ready", h.ready)
	return mux
}

// restart stops idemd, answers once it is down, and starts it again
// down_ms later.
func (h *harness) restart(w http.ResponseWriter, r *http.Request) {
	down, ok := millis(w, r, "down_ms")
	if !ok {
		return
	}
	if !h.acquire(w, r) {
		return
	}
	if err := h.downFor(down); err != nil {
		h.release()
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintf(w, "idemd is down; it starts again in %s\n", down)
}

// unavailable makes the store unreachable for ms: on PostgreSQL the proxy
// severs idemd's connections and refuses new ones; SQLite is in idemd's
// process, so idemd is stopped.
func (h *harness) unavailable(w http.ResponseWriter, r *http.Request) {
	d, ok := millis(w, r, "ms")
	if !ok {
		return
	}
	if !h.acquire(w, r) {
		return
	}
	if h.store == storeSQLite {
		if err := h.downFor(d); err != nil {
			h.release()
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
	} else {
		h.proxy.Cut()
		h.background(d, func() { h.proxy.Restore() })
	}
	fmt.Fprintf(w, "the store is unreachable for %s\n", d)
}

// ready answers once idemd serves with its store reachable.
func (h *harness) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	r = r.WithContext(ctx)
	if !h.acquire(w, r) {
		return
	}
	defer h.release()
	if err := h.idemd.waitReady(ctx); err != nil {
		http.Error(w, "idemd is not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// downFor kills idemd and starts it again d later, in the background; the
// caller holds the lifecycle, which the restart releases.
func (h *harness) downFor(d time.Duration) error {
	if err := h.idemd.kill(); err != nil {
		return err
	}
	h.background(d, func() {
		if err := h.idemd.start(h.ctx); err != nil && h.ctx.Err() == nil {
			fmt.Fprintf(h.log, "sdkharness: restarting idemd: %v\n", err)
		}
	})
	return nil
}

// background runs then after d, unless the harness closes first, and
// releases the lifecycle after it either way.
func (h *harness) background(d time.Duration, then func()) {
	h.pending.Add(1)
	go func() {
		defer h.pending.Done()
		defer h.release()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			then()
		case <-h.ctx.Done(): // close stops idemd and the proxy itself
		}
	}()
}

// acquire takes the lifecycle, or answers 503 when the request or the
// harness ends first.
func (h *harness) acquire(w http.ResponseWriter, r *http.Request) bool {
	select {
	case h.lifecycle <- struct{}{}:
		return true
	case <-r.Context().Done():
		http.Error(w, "another control call is still under way", http.StatusServiceUnavailable)
	case <-h.ctx.Done():
		http.Error(w, "the harness is shutting down", http.StatusServiceUnavailable)
	}
	return false
}

func (h *harness) release() { <-h.lifecycle }

// millis reads a duration in milliseconds from the query, or answers 400.
func millis(w http.ResponseWriter, r *http.Request, name string) (time.Duration, bool) {
	raw := r.URL.Query().Get(name)
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 || n > maxControlMillis {
		http.Error(w, fmt.Sprintf("%s is %q; it must be a whole number of milliseconds from 0 to %d", name, raw, maxControlMillis), http.StatusBadRequest)
		return 0, false
	}
	return time.Duration(n) * time.Millisecond, true
}
