package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	rpprof "runtime/pprof"
	"slices"
	"time"
)

// bench runs the benchmark the flags describe and writes the report.
func (c *cli) bench(ctx context.Context, stdout, stderr io.Writer) (err error) {
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
		Rate: c.Rate,
	}
	if c.Ops > 0 {
		rep.OpsPerTarget = c.Ops
	} else {
		rep.DurationPerTarget = c.Duration.String()
	}

	// Read before anything of this run adds to it: what the neighbours do.
	rep.LoadBefore = loadAverage()

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
	r := newRunner(c.Concurrency, prog)

	if c.Warmup > 0 {
		for _, t := range targets {
			prog.phase("warm-up", t.name(), 0, 0)
			r.round(ctx, t, newWorkload(scenarioUnique, runID+"-warmup", c.Concurrency), c.Warmup, 0, c.Rate, nil)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
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
		tallies := make([]*tally, len(targets))
		workloads := make([]*workload, len(targets))
		for i, t := range targets {
			tallies[i] = newTally(t.name(), scenario)
			workloads[i] = newWorkload(scenario, runID+"-"+scenario, c.Concurrency)
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
	case "service":
		addr := c.Addr
		var idemd *localIdemd
		if c.StartIdemd {
			logw := stderr
			if c.IdemdLog != "-" {
				f, err := os.OpenFile(c.IdemdLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
				if err != nil {
					return nil, fmt.Errorf("--idemd-log: %w", err)
				}
				logw = f
				c.closers = append(c.closers, f.Close)
			}
			var err error
			idemd, err = startIdemd(ctx, c.DatabaseURL, "idem_bench_"+runID, c.IdemdPoolMaxConns, c.SweepInterval,
				newIdemdLogger(logw, c.IdemdLogLevel))
			if err != nil {
				return nil, fmt.Errorf("--start-idemd: %w", err)
			}
			addr = idemd.addr
			rep.IdemdPoolMaxConns = idemd.maxConns()
			rep.IdemdAddr = "in-process (--start-idemd)"
		} else {
			rep.IdemdAddr = addr
		}
		cl, err := c.dialService(addr)
		if err != nil {
			if idemd != nil {
				_ = idemd.close(context.WithoutCancel(ctx))
			}
			return nil, err
		}
		t := &serviceTarget{client: cl, namespace: c.Namespace, leaseTTL: c.LeaseTTL, result: result, idemd: idemd}
		if err := t.probe(ctx, addr); err != nil {
			_ = t.close(context.WithoutCancel(ctx))
			return nil, err
		}
		return t, nil
	case "sql":
		maxConns := c.SQLPoolMaxConns
		if maxConns <= 0 {
			maxConns = int32(c.Concurrency)
		}
		rep.SQLPoolMaxConns = maxConns
		return openSQL(ctx, c.DatabaseURL, "idem_bench_sql_"+runID, maxConns, c.Namespace, result)
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
