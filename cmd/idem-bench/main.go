// Command idem-bench is a load generator (closed loop, or open loop at a fixed
// rate with --rate) that measures idem
// against what it replaces: the same Claim-then-Complete job done through the
// service (gRPC, Go SDK), by hand with two SQL statements on the same
// Postgres, and with a Redis lock (fast, not durable: a reference).
//
// C workers each run one job after another, as fast as the target answers.
// With --rate R the jobs start on a fixed schedule instead, R per second, on
// at most C workers, and their latency counts from the intended start time.
// A job ("op") is a Claim and, when it acquired the key, a Complete; a Claim
// that answers IN_PROGRESS or replays a finished job is an op too. Latencies
// go into HDR histograms. With --compare the targets run interleaved in short
// rounds (A B C A B C …) so that a neighbour's load or a checkpoint hits every
// target alike, and the table gives each target's throughput as a ratio of
// the sql target's, measured in the same run.
//
//	idem-bench --start-idemd --compare -c 32 -d 10s --scenario unique,hot,replay
//
// --start-idemd starts idemd as a process of its own on a loopback port, over
// a schema of its own (or over SQLite for the service-sqlite target), so
// nothing but Postgres has to run; --idemd-replicas N starts N of them on one
// schema for each target on Postgres, the workers spread over them; --addr
// drives an idemd that is already running. Each target's CPU time per job is given by process (idem-bench,
// idemd, Postgres), with the WAL it wrote. docs/BENCHMARKS.md has the numbers and how to read
// them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
)

// maxBatchSize is the most items idemd takes in one batch call by default
// (--batch-max-items).
const maxBatchSize = 500

// maxReplicas bounds --idemd-replicas: each replica's pool takes its
// connections from Postgres's max_connections.
const maxReplicas = 8

// defaultDatabaseURL is the local Postgres that make bench and the tests use.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

type cli struct {
	Addr        string `default:"127.0.0.1:7070" env:"IDEM_ADDR" placeholder:"HOST:PORT" help:"idemd to drive (service target). Ignored with --start-idemd."`
	Token       string `env:"IDEM_TOKEN" placeholder:"TOKEN" help:"Bearer token of a tenant, when the idemd at --addr runs with tenants."`
	TLS         bool   `name:"tls" env:"IDEM_TLS" help:"Connect to --addr over TLS with the system's CAs."`
	Insecure    bool   `env:"IDEM_INSECURE" help:"Allow plaintext to an --addr that is not a loopback address."`
	Coalesce    bool   `env:"IDEM_BENCH_COALESCE" help:"The service targets' Go SDK client gathers concurrent Claims and Completes into BatchClaim and BatchComplete RPCs (client.WithCoalescing)."`
	DatabaseURL string `env:"IDEM_DATABASE_URL" default:"${default_database_url}" placeholder:"postgres://…" help:"Postgres for the sql target (it creates a schema of its own and drops it at the end) and for --start-idemd."`
	RedisAddr   string `env:"IDEM_REDIS_ADDR" default:"127.0.0.1:6379" placeholder:"HOST:PORT" help:"Redis for the redis target; without one answering, the target is skipped."`

	StartIdemd        bool          `help:"Start idemd (idemd serve) as a process of its own on loopback ports for each service target: over a fresh schema in --database-url that is dropped at the end, or for service-sqlite over SQLite in a temporary directory."`
	IdemdBin          string        `placeholder:"PATH" help:"The idemd binary --start-idemd runs; without it idem-bench builds one with the go command (run it from the idem module)."`
	IdemdBinB         string        `name:"idemd-bin-b" placeholder:"PATH" help:"The idemd binary of the service-b target: another build of idemd run next to --idemd-bin's in the same interleaved rounds, for A/B comparisons."`
	IdemdReplicas     int           `default:"1" placeholder:"N" help:"With --start-idemd, how many idemd processes serve each service target on Postgres (service, service-b, service-prefilled): replicas on one schema, worker i sending its jobs to replica i mod N, as workers spread over replicas behind a load balancer; the target's idemd CPU is all of theirs (1 to ${max_replicas}). SQLite targets run one idemd: a SQLite file takes one."`
	IdemdPoolMaxConns int32         `placeholder:"N" help:"pool_max_conns of the idemd that --start-idemd runs; 0 keeps idemd's own default."`
	IdemdLogLevel     string        `enum:"debug,info,warn,error" default:"info" help:"Log level of the idemd that --start-idemd runs (idemd's default is info)."`
	IdemdLog          string        `default:"/dev/null" placeholder:"FILE" help:"Where the idemd that --start-idemd runs writes its log (stderr); - for this process's stderr."`
	SweepInterval     time.Duration `default:"10s" help:"Sweeper interval of the idemd that --start-idemd runs, as idemd's --sweep-interval; 0 turns it off."`
	IdemdCPUProfile   string        `name:"idemd-cpuprofile" placeholder:"FILE" help:"Write a CPU profile of the started idemd over the measured rounds (fetched from its /debug/pprof/profile; needs --duration). With several idemds (targets or replicas), FILE gets each one's name (service, service-r2, …) before its extension."`
	IdemdMemProfile   string        `name:"idemd-memprofile" placeholder:"FILE" help:"Write the started idemd's allocation profile (/debug/pprof/allocs) at the end; named like --idemd-cpuprofile."`
	SQLPoolMaxConns   int32         `name:"sql-pool-max-conns" placeholder:"N" help:"Connections of the sql target's pool; 0 means one per worker (--concurrency)."`

	Targets     []string      `name:"target" short:"t" sep:"," enum:"service,service-sqlite,service-prefilled,service-b,service-sqlite-b,http,http-plain,sql,redis" placeholder:"TARGET" help:"Targets (comma-separated): service (idemd; with --start-idemd on Postgres), service-sqlite (an idemd on its embedded SQLite store; needs --start-idemd), service-prefilled (an idemd on Postgres whose table holds --prefill records before the first round; needs --start-idemd), service-b (the idemd binary --idemd-bin-b on Postgres, to compare two builds in one run), service-sqlite-b (the same on SQLite), http (a job is a POST with an Idempotency-Key to an HTTP server in this process behind the Go middleware client/idemhttp, on an idemd as service has, whose handler does nothing), http-plain (the same server without the middleware), sql, redis. Default: service, or service, sql and redis with --compare."`
	Scenarios   []string      `name:"scenario" short:"s" sep:"," enum:"unique,hot,replay,batch,steps,wait" default:"unique" placeholder:"SCENARIO" help:"Scenarios: unique (every job a new key), hot (the workers share 10 keys), replay (80% of Claims hit completed keys), batch (each worker receives --batch-size new messages at once: the service targets claim them with one BatchClaim and complete them with one BatchComplete, sql and redis claim and complete one message at a time; ops count messages, --ops rounded up to whole deliveries, and latencies are a whole delivery's), steps (a job of --steps effects on each service target, three ways in the same rounds: TARGET-steps claims one key and records a CompleteStep per effect, TARGET-steps-started a StartStep before each too, TARGET-keys claims and completes a key per effect; ops count jobs; the other targets sit it out), wait (alone: the time from a Complete on one replica to the answer of a Claim waiting on another; see --wait-addr)."`
	BatchSize   int           `default:"100" placeholder:"N" help:"The batch scenario: messages per delivery (1 to 500, idemd's default --batch-max-items)."`
	Steps       int           `default:"3" placeholder:"N" help:"The steps scenario: effects per job (1 to 64, idemd's default --max-steps)."`
	Concurrency int           `short:"c" default:"32" help:"Workers, each running one job after another (closed loop); with --rate, the most jobs in flight at once."`
	Rate        float64       `env:"IDEM_BENCH_RATE" default:"0" placeholder:"R" help:"Open loop: start R jobs per second in all (per round, on a fixed schedule) instead of a closed loop; 0 is the closed loop. Latency is measured from each job's intended start time, so time spent waiting for one of the --concurrency workers counts (no coordinated omission); jobs that start over 1 ms late are reported."`
	Duration    time.Duration `short:"d" default:"10s" help:"Measured time per target and scenario, split into --rounds."`
	Ops         int64         `placeholder:"N" help:"Measure N jobs per target and scenario instead of a --duration."`
	Rounds      int           `default:"0" placeholder:"N" help:"Rounds per target with --compare (default 5); without --compare each target runs in one round."`
	Warmup      time.Duration `default:"1s" help:"Unmeasured load per target before its first round, to open connections and prepare statements."`
	Compare     bool          `help:"Run the targets interleaved in rounds (A B C A B C …) and give each one's throughput as a ratio of sql."`
	Namespace   string        `default:"bench" help:"Namespace of the jobs."`
	ResultBytes int           `default:"64" help:"Size of the result each Complete stores."`
	LeaseTTL    time.Duration `default:"0s" help:"Lease of each Claim; 0 lets idemd apply its default (the sql and redis targets use 5m)."`

	WaitAddr   string        `env:"IDEM_BENCH_WAIT_ADDR" placeholder:"HOST:PORT" help:"The wait scenario's waiting Claims go to this idemd, another replica on the same database as --addr, which gets the Completes; default --addr. Ignored with --start-idemd, which starts both replicas."`
	WaitSettle time.Duration `default:"50ms" help:"The wait scenario: how long a waiting Claim has to start waiting before the Complete is sent."`

	Prefill int64 `default:"5000000" placeholder:"N" help:"Records in service-prefilled's table before its first round: COMPLETED, retention left, inserted with one INSERT … SELECT generate_series (the time it takes is reported)."`
	Purge   int64 `default:"0" placeholder:"N" help:"Growth: run the service target (--start-idemd) for half of --rounds, then fill its table with N records whose retention has passed and run rounds (at most 1 s each) until its idemd's sweeper has purged them, then the other half; report Claim latency with and without the purge and how long the purge took. Use a short --sweep-interval."`

	JSON       bool   `help:"Print one JSON object for machines instead of the table."`
	Progress   string `enum:"auto,always,never" default:"auto" help:"Progress bar on stderr: auto shows it only when stderr is a terminal."`
	CPUProfile string `name:"cpuprofile" placeholder:"FILE" help:"Write a CPU profile of the measured rounds of this process (the load generator; --idemd-cpuprofile profiles the started idemd)."`
	MemProfile string `name:"memprofile" placeholder:"FILE" help:"Write an allocation profile (alloc_space, alloc_objects) at the end."`
	PprofAddr  string `placeholder:"HOST:PORT" help:"Serve net/http/pprof on this address while the benchmark runs."`

	closers []func() error // files to close after the targets
	pg      *pgMonitor     // nil when there is no Postgres to read
}

func (c *cli) Validate() error {
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("--concurrency is %d; it must be at least 1", c.Concurrency)
	case c.Ops < 0:
		return fmt.Errorf("--ops is %d; it must be positive", c.Ops)
	case c.Ops == 0 && c.Duration <= 0:
		return errors.New("--duration must be positive (or pass --ops N)")
	case c.Rounds < 0:
		return fmt.Errorf("--rounds is %d; it must be positive", c.Rounds)
	case c.ResultBytes < 0:
		return fmt.Errorf("--result-bytes is %d; it must be 0 or more", c.ResultBytes)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("--rate is %v; it must be 0 (closed loop) or a positive number of jobs per second", c.Rate)
	case c.Warmup < 0:
		return fmt.Errorf("--warmup is %s; it must be 0 or more", c.Warmup)
	case (slices.Contains(c.Targets, "service-sqlite") || slices.Contains(c.Targets, "service-prefilled")) && !c.StartIdemd:
		return errors.New("--target service-sqlite and service-prefilled need --start-idemd: idem-bench starts those idemds itself")
	case (slices.Contains(c.Targets, "service-b") || slices.Contains(c.Targets, "service-sqlite-b")) && (!c.StartIdemd || c.IdemdBinB == ""):
		return errors.New("--target service-b and service-sqlite-b need --start-idemd and --idemd-bin-b")
	case slices.Contains(c.Scenarios, scenarioWait) && (len(dedupe(c.Scenarios)) > 1 || c.Compare || c.Rate > 0 ||
		(len(c.Targets) > 0 && !slices.Equal(dedupe(c.Targets), []string{"service"}))):
		return errWaitAlone
	case c.Steps < 1 || c.Steps > maxSteps:
		return fmt.Errorf("--steps is %d; it must be 1 to %d (idemd's default --max-steps)", c.Steps, maxSteps)
	case slices.Contains(c.Scenarios, scenarioSteps) && len(c.Targets) > 0 &&
		!slices.ContainsFunc(c.Targets, func(name string) bool { return strings.HasPrefix(name, "service") }):
		return errors.New("--scenario steps runs on the service targets (service, service-sqlite, …): name one of them in --target")
	case slices.Contains(c.Scenarios, scenarioSteps) && c.Purge > 0:
		return errors.New("--purge measures single Claims: run it without --scenario steps")
	case c.BatchSize < 1 || c.BatchSize > maxBatchSize:
		return fmt.Errorf("--batch-size is %d; it must be 1 to %d (idemd's default --batch-max-items)", c.BatchSize, maxBatchSize)
	case slices.Contains(c.Scenarios, scenarioBatch) && c.Rate > 0:
		return errors.New("--scenario batch runs a closed loop: --rate would have to count deliveries or messages; leave it out")
	case slices.Contains(c.Scenarios, scenarioBatch) && c.Purge > 0:
		return errors.New("--purge measures single Claims: run it without --scenario batch")
	case c.IdemdReplicas < 1 || c.IdemdReplicas > maxReplicas:
		return fmt.Errorf("--idemd-replicas is %d; it must be 1 to %d", c.IdemdReplicas, maxReplicas)
	case c.IdemdReplicas > 1 && !c.StartIdemd:
		return errors.New("--idemd-replicas needs --start-idemd: idem-bench starts the replicas itself")
	case c.IdemdReplicas > 1 && (slices.Contains(c.Scenarios, scenarioWait) || c.Purge > 0):
		return errors.New("--idemd-replicas does not apply to --scenario wait, which starts its two replicas itself, nor to --purge, which watches one idemd's sweeper")
	case c.WaitSettle < 0:
		return fmt.Errorf("--wait-settle is %s; it must be 0 or more", c.WaitSettle)
	case c.Prefill < 1:
		return fmt.Errorf("--prefill is %d; it must be at least 1", c.Prefill)
	case c.Purge < 0:
		return fmt.Errorf("--purge is %d; it must be 0 (no purge) or more", c.Purge)
	case c.Purge > 0 && (!c.StartIdemd || !slices.Equal(dedupe(c.Targets), []string{"service"})):
		return errors.New("--purge needs --start-idemd and --target service alone: the idemd it starts does the purge")
	case c.Purge > 0 && c.SweepInterval <= 0:
		return errors.New("--purge needs the sweeper: pass a --sweep-interval, e.g. 1s")
	case c.Purge > 0 && c.Ops > 0:
		return errors.New("--purge needs --duration, not --ops: the purge decides how many rounds run")
	case (c.IdemdCPUProfile != "" || c.IdemdMemProfile != "") && !c.StartIdemd:
		return errors.New("--idemd-cpuprofile and --idemd-memprofile need --start-idemd; profile an idemd of your own with its --pprof")
	case c.IdemdCPUProfile != "" && c.Ops > 0:
		return errors.New("--idemd-cpuprofile needs --duration, not --ops: the profile's length is set when it starts")
	}
	return nil
}

func main() {
	// A closed pipe (idem-bench … | head) must not kill the run before it
	// drops its schemas: the write fails instead, after the clean-up.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "idem-bench: %v\n", err)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

// run parses args and runs the benchmark, writing the report to stdout and
// everything meant for people to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c cli
	parser, err := newParser(&c, stdout, stderr)
	if err != nil {
		return err
	}
	if _, err := parseArgs(parser, args); err != nil {
		if errors.Is(err, errHelpShown) {
			return nil
		}
		return err
	}
	return c.bench(ctx, stdout, stderr)
}

// newParser is the command line, parsed into c.
func newParser(c *cli, stdout, stderr io.Writer) (*kong.Kong, error) {
	return kong.New(c,
		kong.Name("idem-bench"),
		kong.Description("Load-test idem against the direct-SQL pattern and a Redis lock: ops/s, latency percentiles and ratios to sql."),
		kong.Vars{"default_database_url": defaultDatabaseURL, "max_replicas": strconv.Itoa(maxReplicas)},
		kong.Writers(stdout, stderr),
		kong.Exit(func(int) { panic(errHelpShown) }),
	)
}

// errHelpShown stops run after kong printed --help.
var errHelpShown = errors.New("help shown")

func parseArgs(parser *kong.Kong, args []string) (ctx *kong.Context, err error) {
	defer func() {
		if p := recover(); p != nil {
			if p != errHelpShown {
				panic(p)
			}
			err = errHelpShown
		}
	}()
	return parser.Parse(args)
}
