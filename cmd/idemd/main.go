// Command idemd is the idem server: it serves the gRPC API, applies the
// schema's migrations and runs the sweeper.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store/postgres"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise
// the module version from the build info is used.
var version = ""

type cli struct {
	Serve   serveCmd   `cmd:"" help:"Serve the gRPC API and run the sweeper."`
	Migrate migrateCmd `cmd:"" help:"Apply pending schema migrations and exit."`
	Sweep   sweepCmd   `cmd:"" help:"Expire lapsed leases and purge old records."`
	Version versionCmd `cmd:"" help:"Print the version and exit."`
	Token   tokenCmd   `cmd:"" help:"Make bearer tokens for tenants."`
}

type logFlags struct {
	LogFormat string `enum:"text,json" default:"text" env:"IDEM_LOG_FORMAT" help:"Log format: text or json."`
	LogLevel  string `enum:"debug,info,warn,error" default:"info" env:"IDEM_LOG_LEVEL" help:"Lowest level logged: debug, info, warn or error."`
}

func (f logFlags) logger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(f.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if f.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

type databaseFlags struct {
	DatabaseURL string `required:"" env:"IDEM_DATABASE_URL" placeholder:"postgres://…" help:"PostgreSQL URL. Add search_path=SCHEMA to keep idem in its own schema, pool_max_conns=N to size the pool."`
}

// connect opens the pool, or returns one line that says what to check.
func (f databaseFlags) connect(ctx context.Context) (*pgxpool.Pool, error) {
	if strings.TrimSpace(f.DatabaseURL) == "" {
		// pgx would otherwise fall back to libpq's defaults (a local socket,
		// the OS user's database) and quietly migrate whatever it finds there.
		return nil, errors.New("--database-url is empty; pass it or set IDEM_DATABASE_URL to a postgres:// URL")
	}
	pool, err := postgres.Connect(ctx, f.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the database at %s: %s", redactURL(f.DatabaseURL), oneLine(err))
	}
	return pool, nil
}

type migrateCmd struct {
	databaseFlags
	logFlags
}

func (c *migrateCmd) Run(ctx context.Context) error {
	pool, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := postgres.Migrate(ctx, pool)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if len(applied) == 0 {
		fmt.Printf("schema is up to date at version %d\n", postgres.LatestVersion())
		return nil
	}
	fmt.Printf("applied migrations %v; schema is at version %d\n", applied, postgres.LatestVersion())
	return nil
}

type versionCmd struct{}

func (versionCmd) Run() error {
	fmt.Println("idemd", buildVersion())
	return nil
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}

func main() {
	var c cli
	parser := kong.Must(&c,
		kong.Name("idemd"),
		kong.Description("idem makes a job's side effect happen once: workers Claim before it and Complete or Fail after it."),
	)
	kctx, err := parser.Parse(os.Args[1:])
	parser.FatalIfErrorf(err)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	kctx.BindTo(ctx, (*context.Context)(nil))
	if err := kctx.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "idemd: %v\n", err)
		if errors.Is(err, context.Canceled) {
			os.Exit(130)
		}
		os.Exit(1)
	}
}

// oneLine flattens an error that pgx spreads over several lines (one per
// address tried), dropping repeats, so a start-up failure is one line.
func oneLine(err error) string {
	var parts []string
	seen := map[string]bool{}
	for _, line := range strings.Split(err.Error(), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !seen[line] {
			seen[line] = true
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, " ")
}

// durationFlag checks a duration flag against bounds.
func durationFlag(name string, d, min, max time.Duration) error {
	if d < min || d > max {
		return fmt.Errorf("--%s is %s; it must be between %s and %s", name, d, min, max)
	}
	return nil
}
