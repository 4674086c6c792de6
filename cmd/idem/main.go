// Command idem is the command-line client of the idem service, for
// operators and for workers written as shell scripts: claim, complete, fail,
// heartbeat and look up records, and list, delete and count them through the
// AdminService. Its exit codes (exit.go) tell a script what happened without
// parsing any output.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"google.golang.org/grpc"

	"github.com/idemhq/idem/client"
	"github.com/idemhq/idem/internal/buildinfo"
	"github.com/idemhq/idem/internal/envflag"
)

// version and commit are set at build time with -ldflags "-X
// main.version=… -X main.commit=…" (make build does); otherwise the module
// version and the commit from the build info are used.
var version, commit string

type cli struct {
	globals
	VersionFlag kong.VersionFlag `name:"version" help:"Print the version, the commit and the Go version, and exit."`

	Claim     claimCmd     `cmd:"" help:"Ask for the right to run a job; print its lease token."`
	Complete  completeCmd  `cmd:"" help:"Record a job's success and its result."`
	Fail      failCmd      `cmd:"" help:"Record a job's failure: permanent, or --retryable to hand it back."`
	Heartbeat heartbeatCmd `cmd:"" help:"Extend the lease of a job that is still running."`
	Lookup    lookupCmd    `cmd:"" help:"Show a record without changing it."`
	List      listCmd      `cmd:"" help:"List records, e.g. stuck claims (AdminService)."`
	Delete    deleteCmd    `cmd:"" help:"Evict one record whatever its state (AdminService)."`
	Resolve   resolveCmd   `cmd:"" help:"Resolve an UNRESOLVED record: completed, failed or released (AdminService)."`
	Stats     statsCmd     `cmd:"" help:"Count records per namespace and state (AdminService)."`
	Version   versionCmd   `cmd:"" help:"Print the version, the commit and the Go version, and exit."`
}

type versionCmd struct{}

func (versionCmd) Run(a *app) error {
	_, err := fmt.Fprintln(a.stdout, buildinfo.Read(version, commit).Line("idem"))
	return err
}

func (cli) Help() string {
	return `Workers call "idem claim" before an irreversible side effect and "idem complete" or "idem fail" after it, so that a job delivered more than once has its effect once. The exit code says what happened; the table is at the end of this help.

Output: stdout carries only what a script captures (a lease token, a result, a table, or with -o json the RPC's response); messages for people go to stderr (-q silences them). -o json prints the response message as protobuf JSON: the field names are the proto's JSON names (leaseExpiresAt), unset and zero fields are left out, bytes are base64, int64 values are strings.

Connection: plaintext only to a loopback --addr (127.0.0.0/8, ::1, localhost, unix:); for any other address pass --tls (any --tls-* flag implies it), or --insecure when plaintext is intended.

Example:

    if TOKEN=$(idem claim -n process_payment -k order-1042); then
      charge_card && idem complete -n process_payment -k order-1042 --lease-token "$TOKEN" --result ok
    fi`
}

// globals are the flags every command takes.
type globals struct {
	Addr          string        `group:"global" default:"127.0.0.1:7070" env:"IDEM_ADDR" placeholder:"HOST:PORT" help:"idemd's gRPC address, or any gRPC target (dns:///host:port, unix:///path); ${default} by default."`
	Token         string        `group:"global" env:"IDEM_TOKEN" placeholder:"TOKEN" help:"Bearer token of your tenant, when idemd runs with tenants. Never sent in plaintext off this machine."`
	TLS           bool          `group:"global" name:"tls" env:"IDEM_TLS" help:"Connect over TLS, checking the server's certificate against the system's CAs or --tls-ca."`
	TLSCA         string        `group:"global" name:"tls-ca" env:"IDEM_TLS_CA" placeholder:"FILE" help:"PEM file of the CA that signed the server's certificate (implies --tls)."`
	TLSCert       string        `group:"global" name:"tls-cert" env:"IDEM_TLS_CERT" placeholder:"FILE" help:"PEM client certificate for mutual TLS; needs --tls-key (implies --tls)."`
	TLSKey        string        `group:"global" name:"tls-key" env:"IDEM_TLS_KEY" placeholder:"FILE" help:"PEM private key of --tls-cert (implies --tls)."`
	TLSServerName string        `group:"global" name:"tls-server-name" env:"IDEM_TLS_SERVER_NAME" placeholder:"NAME" help:"Name to check the server's certificate against, when it is not the host of --addr (implies --tls)."`
	Insecure      bool          `group:"global" env:"IDEM_INSECURE" help:"Allow plaintext to an --addr that is not a loopback address (e.g. a sidecar terminates TLS)."`
	Output        string        `group:"global" short:"o" enum:"table,json" default:"table" env:"IDEM_OUTPUT" help:"Output format: table (for people, and bare values for scripts) or json (the RPC's response as protobuf JSON)."`
	Quiet         bool          `group:"global" short:"q" env:"IDEM_QUIET" help:"Print no messages on stderr except errors."`
	Timeout       time.Duration `group:"global" default:"10s" env:"IDEM_TIMEOUT" help:"How long to wait for each answer from idemd."`
}

// app is what every command's Run gets: the flags, the process's streams
// and the connection, made on first use.
type app struct {
	*globals
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	conn   *client.Client
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(int(code))
}

// run runs idem with args and returns its exit code. Every error is one line
// on stderr.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) exitCode {
	var c cli
	parser, err := kong.New(&c,
		kong.Name("idem"),
		kong.Description("idem is the command line of the idem service: it makes a job's side effect happen once."),
		kong.Writers(stdout, stderr),
		kong.Vars{"version": buildinfo.Read(version, commit).Line("idem")},
		kong.ConfigureHelp(kong.HelpOptions{Compact: true, WrapUpperBound: 100}),
		kong.Help(helpPrinter),
		kong.ExplicitGroups([]kong.Group{{Key: "global", Title: "Global flags (every command):"}}),
	)
	if err != nil {
		fmt.Fprintf(stderr, "idem: %v\n", err) // a bug in the flag declarations
		return exitError
	}
	envflag.UnsetEmptyBools(parser.Model)
	kctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "idem: %v; %s\n", err, helpHint(err))
		return exitError
	}
	if c.Timeout <= 0 {
		fmt.Fprintf(stderr, "idem: --timeout is %s; pass a duration above zero, such as 10s\n", c.Timeout)
		return exitError
	}
	a := &app{globals: &c.globals, ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	defer a.close()
	err = kctx.Run(a)
	if err == nil {
		return exitOK
	}
	code := classify(err)
	if ctx.Err() != nil && code != exitOK {
		fmt.Fprintln(stderr, "idem: interrupted before idemd answered; the call may or may not have taken effect")
		return exitInterrupted
	}
	if msg := describe(err); msg != "" {
		fmt.Fprintf(stderr, "idem: %s\n", msg)
	}
	return code
}

// helpHint points at the help of the command that was being parsed.
func helpHint(err error) string {
	var pe *kong.ParseError
	if errors.As(err, &pe) && pe.Context != nil {
		if cmd := pe.Context.Selected(); cmd != nil {
			return fmt.Sprintf(`run "idem %s --help" for its flags`, cmd.Path())
		}
	}
	return `run "idem --help" for the commands`
}

// helpPrinter is kong's, with the exit code table at the end of idem --help
// and a usage line that shows required flags of which one is given as such.
func helpPrinter(options kong.HelpOptions, ctx *kong.Context) error {
	stdout := ctx.Stdout
	var buf bytes.Buffer
	ctx.Stdout = &buf
	err := kong.DefaultHelpPrinter(options, ctx)
	ctx.Stdout = stdout
	if err != nil {
		return err
	}
	help := buf.String()
	if cmd := ctx.Selected(); cmd != nil {
		help = showChoices(help, cmd)
	}
	if _, err := io.WriteString(stdout, help); err != nil {
		return err
	}
	if ctx.Selected() == nil {
		fmt.Fprintf(stdout, "\nExit codes:\n%s", exitCodeTable())
	}
	return nil
}

// showChoices rewrites the usage line at the top of help: kong lists each
// required flag of an xor group (resolve's --completed --failed --release)
// as if all of them were required; one of them is, so the line shows them
// as a choice, (--completed | --failed | --release).
func showChoices(help string, cmd *kong.Node) string {
	usage, rest, _ := strings.Cut(help, "\n")
	groups := map[string][]string{}
	var order []string
	for _, f := range cmd.Flags {
		if !f.Required || len(f.Xor) == 0 {
			continue
		}
		key := f.Xor[0]
		if groups[key] == nil {
			order = append(order, key)
		}
		groups[key] = append(groups[key], f.Summary())
	}
	for _, key := range order {
		if names := groups[key]; len(names) > 1 {
			usage = strings.Replace(usage, " "+strings.Join(names, " "), " ("+strings.Join(names, " | ")+")", 1)
		}
	}
	return usage + "\n" + rest
}

// say prints a message for people on stderr, unless --quiet.
func (a *app) say(format string, args ...any) {
	if !a.Quiet {
		fmt.Fprintf(a.stderr, "idem: "+format+"\n", args...)
	}
}

// client connects on first use.
func (a *app) client() (*client.Client, error) {
	if a.conn == nil {
		c, err := a.dial()
		if err != nil {
			return nil, err
		}
		a.conn = c
	}
	return a.conn, nil
}

func (a *app) close() {
	if a.conn != nil {
		_ = a.conn.Close()
	}
}

// call runs one RPC under --timeout and wraps its error with what idem was
// doing, for the one-line message and the exit code.
func call[Req, Resp any](a *app, op string, rpc func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	ctx, cancel := context.WithTimeout(a.ctx, a.Timeout)
	defer cancel()
	resp, err := rpc(ctx, req)
	if err != nil {
		return resp, &rpcError{op: op, addr: a.Addr, err: err}
	}
	return resp, nil
}
