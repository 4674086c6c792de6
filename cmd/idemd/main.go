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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/idemhq/idem/internal/buildinfo"
	"github.com/idemhq/idem/internal/envflag"
	"github.com/idemhq/idem/internal/maintenance"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/store/coalesce"
	"github.com/idemhq/idem/store/migrate"
	"github.com/idemhq/idem/store/sqlite"
)

// version and commit are set at build time with -ldflags "-X
// main.version=… -X main.commit=…" (make build does); otherwise the module
// version and the commit from the build info are used.
var version, commit string

type cli struct {
	VersionFlag kong.VersionFlag `name:"version" help:"Print the version, the commit and the Go version, and exit."`

	Serve   serveCmd   `cmd:"" help:"Serve the gRPC API and run the sweeper."`
	Migrate migrateCmd `cmd:"" help:"Apply pending schema migrations and exit (--print: print their SQL instead)."`
	Sweep   sweepCmd   `cmd:"" help:"Expire lapsed leases and purge old records."`
	Version versionCmd `cmd:"" help:"Print the version, the commit and the Go version, and exit."`
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

type migrateCmd struct {
	databaseFlags
	logFlags
	Print bool `help:"Print the SQL that migrating would run now, without running it: the pending migrations inside the migration's transaction, for a DBA to review or to run by hand (psql -v ON_ERROR_STOP=1 -f, sqlite3 FILE <). It reads the schema's version and changes nothing; on SQLite it creates no file."`
}

func (c *migrateCmd) Run(ctx context.Context) error {
	if c.Print {
		return c.print(ctx, os.Stdout, os.Stderr)
	}
	db, err := c.open(ctx, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	applied, err := db.Migrate(ctx, c.logger(os.Stderr))
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if len(applied) == 0 {
		fmt.Printf("schema is up to date at version %d (%s)\n", db.LatestVersion(), db.name)
		return nil
	}
	fmt.Printf("applied migrations %v; schema is at version %d\n", applied, db.LatestVersion())
	return nil
}

// print writes the SQL that migrating would run to stdout, and what it does
// to stderr.
func (c *migrateCmd) print(ctx context.Context, stdout, stderr io.Writer) error {
	path, _, err := c.sqlitePath()
	if err != nil {
		return err
	}
	var script migrate.Script
	where := path
	if path != "" {
		// Not c.open: opening the SQLite store migrates it.
		script, err = sqlite.MigrationScript(ctx, path)
	} else {
		var db *database
		if db, err = c.open(ctx, nil); err != nil {
			return err
		}
		defer db.Close()
		where = db.name
		p, ok := db.Backend.(interface {
			MigrationScript(context.Context) (migrate.Script, error)
		})
		if !ok {
			return fmt.Errorf("migrate --print: the store of %s cannot print its migrations", where)
		}
		script, err = p.MigrationScript(ctx)
	}
	if err != nil {
		return fmt.Errorf("migrate --print: %w", err)
	}
	if script.SQL == "" {
		fmt.Fprintf(stderr, "schema is up to date at version %d (%s): there is no SQL to run\n", script.From, where)
		return nil
	}
	if _, err := io.WriteString(stdout, script.SQL); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "the SQL above takes the schema from version %d to %d (%s); none of it was run\n", script.From, script.To, where)
	return nil
}

type versionCmd struct{}

func (versionCmd) Run() error {
	fmt.Println(buildinfo.Read(version, commit).Line("idemd"))
	return nil
}

func main() {
	var c cli
	parser := kong.Must(&c,
		kong.Name("idemd"),
		kong.Description("idem makes a job's side effect happen once: workers Claim before it and Complete or Fail after it."),
		kong.Vars{
			"version":                buildinfo.Read(version, commit).Line("idemd"),
			"sweep_interval":         maintenance.DefaultSweepInterval.String(),
			"sweep_batch_size":       strconv.Itoa(maintenance.DefaultSweepBatchSize),
			"count_interval":         maintenance.DefaultCountEvery.String(),
			"sweep_duty":             strconv.FormatFloat(maintenance.DefaultSweepDuty, 'g', -1, 64),
			"coalesce_max_in_flight": strconv.Itoa(coalesce.DefaultMaxInFlight),
			"coalesce_max_rows":      strconv.Itoa(coalesce.DefaultMaxRows),
			"max_steps":              strconv.Itoa(limits.DefaultMaxSteps),
			"max_step_bytes":         strconv.Itoa(limits.DefaultMaxStepBytes),
		},
	)
	envflag.UnsetEmptyBools(parser.Model)
	kctx, err := parser.Parse(os.Args[1:])
	if err != nil {
		// The same one line as idem's: what was wrong and where to look.
		if hint := commandFirstHint(parser.Model, err, os.Args[1:]); hint != "" {
			fmt.Fprintf(os.Stderr, "idemd: %v: %s\n", err, hint)
		} else {
			fmt.Fprintf(os.Stderr, "idemd: %v; %s\n", err, helpHint(err))
		}
		os.Exit(1)
	}

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

// helpHint points at the help of the command that was being parsed.
func helpHint(err error) string {
	var pe *kong.ParseError
	if errors.As(err, &pe) && pe.Context != nil {
		if cmd := pe.Context.Selected(); cmd != nil {
			return fmt.Sprintf(`run "idemd %s --help" for its flags`, cmd.Path())
		}
	}
	return `run "idemd --help" for the commands`
}

// commandFirstHint explains an unknown flag given before any command when
// it is a flag of commands (idemd --listen … for idemd serve --listen …):
// which ones, and the command line with the first of them in its place. It
// is "" otherwise.
func commandFirstHint(app *kong.Application, err error, args []string) string {
	var pe *kong.ParseError
	if !errors.As(err, &pe) || pe.Context == nil || pe.Context.Selected() != nil || len(args) == 0 {
		return ""
	}
	name, ok := strings.CutPrefix(args[0], "--")
	if !ok || !strings.HasPrefix(err.Error(), "unknown flag ") {
		return ""
	}
	name, _, _ = strings.Cut(name, "=")
	var first string
	var cmds []string
	for _, cmd := range app.Children {
		for _, f := range cmd.Flags {
			if f.Name == name || f.Tag.Negatable != "" && "no-"+f.Name == name {
				if first == "" {
					first = cmd.Name
				}
				cmds = append(cmds, fmt.Sprintf("%q", "idemd "+cmd.Name))
				break
			}
		}
	}
	if len(cmds) == 0 {
		return ""
	}
	which := cmds[0]
	if len(cmds) > 1 {
		which = strings.Join(cmds[:len(cmds)-1], ", ") + " and " + cmds[len(cmds)-1]
	}
	line := []string{"idemd", first}
	for _, a := range args {
		line = append(line, shellQuote(a))
	}
	return fmt.Sprintf("it is a flag of %s; the command goes first: %s", which, strings.Join(line, " "))
}

// shellQuote quotes s for a shell when it holds more than the characters of
// flags, addresses and URLs.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,:/=@+%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
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
