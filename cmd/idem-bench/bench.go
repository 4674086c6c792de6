package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	rpprof "runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

// bench runs the benchmark the flags describe and writes the report.
func (c *cli) bench(ctx context.Context, stdout, stderr io.Writer) (err error) {
	if slices.Contains(c.Scenarios, scenarioWait) {
		return c.benchWait(ctx, stdout, stderr)
	}
	targetNames := c.Targets
	if len(targetNames) == 0 {
		targetNames = []string{"service"}
		if c.Compare {
			targetNames = []string{"service", "sql", "redis"}
		}
	}
	targetNames = dedupe(targetNames)
	scenarios := dedupe(c.Scenarios)
	rounds := c.Rounds
	if rounds == 0 {
		rounds = 1
		if c.Compare {
			rounds = 5
		}
	}
	runID := newRunID()
	result := make([]byte, c.ResultBytes)
	_, _ = rand.Read(result)

	if c.PprofAddr != "" {
		stopPprof, err := servePprof(c.PprofAddr, stderr)
		if err != nil {
			return err
		}
		defer stopPprof()
	}

	rep := &report{
		Concurrency: c.Concurrency, Rounds: rounds, Compare: c.Compare,
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		ResultBytes: c.ResultBytes, StartedAt: time.Now().UTC().Truncate(time.Second),
		Rate: c.Rate, Coalesce: c.Coalesce,
	}
	if c.Ops > 0 {
		rep.OpsPerTarget = c.Ops
	} else {
		rep.DurationPerTarget = c.Duration.String()
	}

	// Read before anything of this run adds to it: what the neighbours do.
	rep.LoadBefore = loadAverage()

	// Postgres's CPU time and WAL per round, read through a connection of
	// its own; without a Postgres the run goes on without them.
	if pg, err := openPGMonitor(ctx, c.DatabaseURL); err != nil {
		if c.needsPostgres(targetNames) {
			return err
		}
	} else {
		defer pg.close(context.WithoutCancel(ctx))
		c.pg = pg
		rep.PostgresLocal = pg.local()
	}
	if c.StartIdemd && c.IdemdBin == "" && slices.ContainsFunc(targetNames, isServiceTarget) {
		dir, err := os.MkdirTemp("", "idem-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if c.IdemdBin, err = buildIdemd(ctx, dir, stderr); err != nil {
			return err
		}
	}

	// Open the targets. Without a Redis the redis target is skipped, with
	// its reason; the service and sql targets failing fail the run.
	var targets []target
	// Deferred first, so run last: the log file outlives idemd.
	defer func() {
		for _, f := range c.closers {
			_ = f()
		}
	}()
	defer func() {
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, t := range targets {
			if cerr := t.close(cleanup); cerr != nil {
				err = errors.Join(err, fmt.Errorf("%s: %w", t.name(), cerr))
			}
		}
	}()
	for _, name := range targetNames {
		t, err := c.open(ctx, name, runID, result, rep, stderr)
		if err != nil {
			return err
		}
		if t != nil {
			targets = append(targets, t)
		}
	}
	if len(targets) == 0 {
		return errors.New("no target can run")
	}

	prog := newProgress(stderr, c.Progress, len(scenarios)*len(targets)*rounds, c.Ops, c.Duration/time.Duration(rounds))
	defer prog.stop()
	r := newRunner(c.Concurrency, prog, c.pg)

	if c.Warmup > 0 {
		for _, t := range targets {
			prog.phase("warm-up", t.name(), 0, 0)
			r.round(ctx, t, newWorkload(scenarioUnique, runID+"-warmup", c.Concurrency), c.Warmup, 0, c.Rate, nil)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}

	if c.IdemdCPUProfile != "" {
		perRound := c.Duration / time.Duration(rounds)
		measured := time.Duration(len(scenarios)*len(targets)*rounds)*perRound + time.Second
		wait := c.idemdCPUProfiles(ctx, targets, measured)
		defer func() { err = errors.Join(err, wait()) }()
	}
	if c.CPUProfile != "" {
		f, err := os.Create(c.CPUProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := rpprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer rpprof.StopCPUProfile()
	}
	for _, scenario := range scenarios {
		if c.Purge > 0 {
			tallies, err := c.purgeRun(ctx, r, targets[0].(*serviceTarget), scenario, runID, rounds, rep)
			if err != nil {
				return err
			}
			rep.add(tallies)
			continue
		}
		targets := targets
		if scenario == scenarioSteps {
			targets = stepsTargets(targets, c.Steps)
			rep.Steps = c.Steps
		}
		tallies := make([]*tally, len(targets))
		workloads := make([]*workload, len(targets))
		for i, t := range targets {
			tallies[i] = newTally(t.name(), scenario)
			if ds := idemdsOf(t); len(ds) > 0 {
				tallies[i].hasIdemd = true
				tallies[i].pgStore = ds[0].appName != ""
			}
			if _, ok := t.(*sqlTarget); ok {
				tallies[i].pgStore = true
			}
			prefix := runID + "-" + scenario
			if scenario == scenarioSteps {
				prefix += "-" + t.name() // the forms of a target share its idemd
			}
			workloads[i] = newWorkload(scenario, prefix, c.Concurrency)
			if scenario == scenarioBatch {
				workloads[i].batchSize = c.BatchSize
			}
		}
		if scenario == scenarioBatch {
			rep.BatchSize = c.BatchSize
		}
		for round := range rounds {
			for i, t := range targets {
				perRound := c.Duration / time.Duration(rounds)
				ops := int64(0)
				if c.Ops > 0 {
					ops = c.Ops / int64(rounds)
					if round < int(c.Ops%int64(rounds)) {
						ops++
					}
					if ops == 0 {
						continue // fewer jobs than rounds
					}
				}
				prog.phase(scenario, t.name(), round+1, rounds)
				r.round(ctx, t, workloads[i], perRound, ops, c.Rate, tallies[i])
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if tl := tallies[i]; tl.ops == 0 && tl.errors > 0 {
					return fmt.Errorf("%s target, %s scenario: every job failed; the first error: %w", t.name(), scenario, tl.firstErr)
				}
			}
		}
		rep.add(tallies)
	}
	rep.LoadAfter = loadAverage()
	prog.stop()
	if c.MemProfile != "" {
		if err := writeHeapProfile(c.MemProfile); err != nil {
			return err
		}
	}
	if c.IdemdMemProfile != "" {
		if err := c.idemdMemProfiles(ctx, targets); err != nil {
			return err
		}
	}

	if c.JSON {
		return rep.writeJSON(stdout)
	}
	rep.writeTable(stdout)
	return nil
}

// open opens one target. It returns nil and no error when the target is to
// be skipped, after saying why on stderr and in the report.
func (c *cli) open(ctx context.Context, name, runID string, result []byte, rep *report, stderr io.Writer) (target, error) {
	switch name {
	case "service", "service-sqlite", "service-prefilled", "service-b", "service-sqlite-b", "http":
		addrs := []string{c.Addr}
		var idemds []*localIdemd
		if c.StartIdemd {
			var err error
			if idemds, err = c.startService(ctx, name, runID, stderr); err != nil {
				return nil, err
			}
			addrs = addrs[:0]
			for _, d := range idemds {
				addrs = append(addrs, d.addr)
			}
			rep.IdemdAddr = "a process of its own (--start-idemd)"
			if idemds[0].appName != "" {
				rep.IdemdReplicas = len(idemds)
				if m, err := idemds[0].metrics(ctx, "idem_db_pool_max_conns"); err == nil {
					rep.IdemdPoolMaxConns = int32(m["idem_db_pool_max_conns"])
				}
			}
		} else {
			rep.IdemdAddr = c.Addr
		}
		t := &serviceTarget{label: name, namespace: c.Namespace, leaseTTL: c.LeaseTTL, result: result, idemds: idemds}
		for _, addr := range addrs {
			cl, err := c.dialService(addr)
			if err != nil {
				_ = t.close(context.WithoutCancel(ctx))
				return nil, err
			}
			t.clients = append(t.clients, cl)
		}
		t.client = t.clients[0]
		if err := t.probe(ctx, addrs); err != nil {
			_ = t.close(context.WithoutCancel(ctx))
			return nil, err
		}
		if name == "service-prefilled" {
			if err := c.prefill(ctx, idemds[0], rep, stderr); err != nil {
				_ = t.close(context.WithoutCancel(ctx))
				return nil, fmt.Errorf("--prefill: %w", err)
			}
		}
		if name == "http" {
			ht, err := c.newHTTPTarget(name, t, result, c.Concurrency)
			if err != nil {
				_ = t.close(context.WithoutCancel(ctx))
				return nil, err
			}
			return ht, nil
		}
		return t, nil
	case "http-plain":
		return c.newHTTPTarget(name, nil, result, c.Concurrency)
	case "sql":
		maxConns := c.SQLPoolMaxConns
		if maxConns <= 0 {
			maxConns = int32(c.Concurrency)
		}
		rep.SQLPoolMaxConns = maxConns
		return openSQL(ctx, c.DatabaseURL, "idem_bench_sql_"+runID, "idem-bench-sql-"+runID, maxConns, c.Namespace, result)
	case "redis":
		leaseTTL := c.LeaseTTL
		if leaseTTL <= 0 {
			leaseTTL = 5 * time.Minute
		}
		t, err := openRedis(ctx, c.RedisAddr, runID, c.Concurrency, leaseTTL, result)
		if err != nil {
			fmt.Fprintf(stderr, "idem-bench: skipping the redis target: %v\n", err)
			rep.Skipped = append(rep.Skipped, skipped{Target: name, Reason: err.Error()})
			return nil, nil
		}
		return t, nil
	}
	return nil, fmt.Errorf("unknown target %q", name)
}

// startService starts the idemd processes of the service target name for
// --start-idemd: one, or on Postgres --idemd-replicas of them on one schema
// (the first creates it and drops it), all connecting to Postgres under one
// application_name so that their backends' CPU is the target's.
func (c *cli) startService(ctx context.Context, name, runID string, stderr io.Writer) ([]*localIdemd, error) {
	logw := stderr
	if c.IdemdLog != "-" {
		f, err := os.OpenFile(c.IdemdLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("--idemd-log: %w", err)
		}
		logw = f
		c.closers = append(c.closers, f.Close)
	}
	opts := idemdOptions{
		bin: c.IdemdBin, sqlite: name == "service-sqlite" || name == "service-sqlite-b", baseURL: c.DatabaseURL,
		schema: "idem_bench_" + runID, appName: "idem-bench-idemd-" + runID,
		poolMaxConns: c.IdemdPoolMaxConns, sweepInterval: c.SweepInterval,
		logLevel: c.IdemdLogLevel, log: logw,
	}
	switch name {
	case "service-sqlite":
		opts.schema, opts.appName = "", ""
	case "service-sqlite-b":
		opts.bin, opts.schema, opts.appName = c.IdemdBinB, "", ""
	case "service-prefilled":
		opts.schema += "_prefilled"
		opts.appName = "idem-bench-idemd-prefilled-" + runID
	case "service-b":
		opts.bin = c.IdemdBinB
		opts.schema += "_b"
		opts.appName = "idem-bench-idemd-b-" + runID
	case "http":
		opts.schema += "_http"
		opts.appName = "idem-bench-idemd-http-" + runID
	}
	replicas := max(c.IdemdReplicas, 1)
	if opts.sqlite {
		replicas = 1 // a SQLite file serves one idemd
	}
	var idemds []*localIdemd
	for k := range replicas {
		opts.sharedSchema = k > 0
		d, err := startIdemd(ctx, opts)
		if err != nil {
			err = fmt.Errorf("--start-idemd (%s): %w", replicaName(name, k, replicas), err)
			return nil, errors.Join(err, closeIdemds(context.WithoutCancel(ctx), idemds))
		}
		idemds = append(idemds, d)
	}
	return idemds, nil
}

// closeIdemds stops the replicas of one target, the first last: it drops
// the schema the others use.
func closeIdemds(ctx context.Context, idemds []*localIdemd) error {
	var err error
	for _, d := range slices.Backward(idemds) {
		err = errors.Join(err, d.close(ctx))
	}
	return err
}

// replicaName is the target's name for replica k (from 0) of n: the target
// alone when it has one idemd, else with the replica's number, service-r2.
func replicaName(target string, k, n int) string {
	if n == 1 {
		return target
	}
	return target + "-r" + strconv.Itoa(k+1)
}

// isServiceTarget reports whether name is a target served by idemd.
func isServiceTarget(name string) bool { return strings.HasPrefix(name, "service") || name == "http" }

// needsPostgres reports whether one of the targets cannot run without the
// Postgres at --database-url.
func (c *cli) needsPostgres(targets []string) bool {
	return slices.Contains(targets, "sql") || (c.StartIdemd && (slices.Contains(targets, "service") || slices.Contains(targets, "http")))
}

// startedIdemds returns the targets' started idemds, by target name (and
// replica, replicaName).
func startedIdemds(targets []target) map[string]*localIdemd {
	out := map[string]*localIdemd{}
	for _, t := range targets {
		if ds := idemdsOf(t); len(ds) > 0 {
			for k, d := range ds {
				out[replicaName(t.name(), k, len(ds))] = d
			}
		}
	}
	return out
}

// idemdsOf is the idemds that --start-idemd started for t (its replicas), or
// none.
func idemdsOf(t target) []*localIdemd {
	switch t := t.(type) {
	case *serviceTarget:
		return t.idemds
	case *stepsTarget:
		return t.idemds
	case *httpTarget:
		if t.svc != nil {
			return t.svc.idemds
		}
	}
	return nil
}

// profilePath is FILE for one started idemd, or FILE with the target's name
// before its extension when there are several.
func profilePath(file, target string, several bool) string {
	if !several {
		return file
	}
	ext := filepath.Ext(file)
	return strings.TrimSuffix(file, ext) + "." + target + ext
}

// idemdCPUProfiles starts a CPU profile of length d in every started idemd
// and returns a func that waits for them and writes them.
func (c *cli) idemdCPUProfiles(ctx context.Context, targets []target, d time.Duration) func() error {
	idemds := startedIdemds(targets)
	errc := make(chan error, len(idemds))
	for name, idemd := range idemds {
		path := profilePath(c.IdemdCPUProfile, name, len(idemds) > 1)
		go func() {
			secs := int(math.Ceil(d.Seconds()))
			errc <- writeIdemdProfile(ctx, idemd, "/debug/pprof/profile?seconds="+strconv.Itoa(secs), path)
		}()
	}
	return func() error {
		var err error
		for range idemds {
			err = errors.Join(err, <-errc)
		}
		if err != nil {
			return fmt.Errorf("--idemd-cpuprofile: %w", err)
		}
		return nil
	}
}

func (c *cli) idemdMemProfiles(ctx context.Context, targets []target) error {
	idemds := startedIdemds(targets)
	for name, idemd := range idemds {
		path := profilePath(c.IdemdMemProfile, name, len(idemds) > 1)
		if err := writeIdemdProfile(ctx, idemd, "/debug/pprof/allocs?gc=1", path); err != nil {
			return fmt.Errorf("--idemd-memprofile: %w", err)
		}
	}
	return nil
}

func writeIdemdProfile(ctx context.Context, idemd *localIdemd, path, file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := idemd.get(ctx, path, f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// servePprof serves net/http/pprof on addr until the returned func is called.
func servePprof(addr string, stderr io.Writer) (func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	fmt.Fprintf(stderr, "idem-bench: pprof on http://%s/debug/pprof/\n", lis.Addr())
	return func() { _ = srv.Close() }, nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	defer f.Close()
	runtime.GC()
	if err := rpprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	return nil
}

func newRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func dedupe(xs []string) []string {
	var out []string
	for _, x := range xs {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}
