package doctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// notRun lists every block that a page marks `<!-- doctest: skip REASON -->`,
// by page and the block's first line. A block marked so and missing here, or
// listed here and not marked, fails TestPages: a command stops being run
// only by a change to this list, in review.
var notRun = map[string][]string{
	"README.md": {
		"$ make test", // the suite this test is part of
		"git clone https://github.com/idemhq/idem && cd idem", // the network
	},
	"docs/BENCHMARKS.md": { // minutes of load that needs a quiet machine
		"make bench",
		"# An idemd that already runs (IDEM_ADDR, IDEM_TOKEN for one with tenants):",
		"make bench-pinned                    # bench's runs: Postgres on CPU 1, the rest on CPU 0",
		"# 1. unique on an empty table against one holding 5 million records, interleaved",
		"bin/idem-bench --start-idemd --scenario wait -c 16 -d 15s",
	},
	"docs/RELIABILITY.md": {
		"make robustness        # every scenario at full length (40 s of load each), with Patroni and PgBouncer; about 20 minutes in all", // minutes of faults
	},
	"docs/production.md": {
		"make release RELEASE_PLATFORMS=linux/amd64", // minutes; deploy's tests run make release
	},
	"docs/workers.md": {
		"$ grpcurl -plaintext -d '{\"namespace\":\"process_payment\",\"key\":\"order-1042\",\"lease_ttl\":\"30s\"}' \\",      // grpcurl is not installed here
		"make demo                                   # N=1000, K=6, 30 kills; needs IDEM_DATABASE_URL or the local Postgres", // long; a short run is a test
	},
}

var (
	repoRoot string // the repository, absolute
	binDir   string // idemd and idem, built by TestMain
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	root, err := filepath.Abs("../../..")
	if err != nil {
		panic(err)
	}
	repoRoot = root
	dir, err := os.MkdirTemp("", "idem-doctest-bin")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	binDir = dir
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/idemd", "./cmd/idem")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "doctest: build idemd and idem:", err)
		return 1
	}
	return m.Run()
}

// TestPages runs the shell blocks of README.md and of every docs/*.md, each
// page in a shell of its own, against an idemd of its own.
func TestPages(t *testing.T) {
	t.Parallel()
	files, err := pages(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, file := range files {
		seen[file] = true
		p, err := parsePage(repoRoot, file)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			runPage(t, p)
		})
	}
	for file := range notRun {
		if !seen[file] {
			t.Errorf("notRun names %s, which is not a page (README.md or docs/*.md)", file)
		}
	}
}

// runnable sorts a page's blocks: those to run, in order, and the first
// lines of those marked skip. A block of commands that is neither is an
// error.
func runnable(t *testing.T, p *page) []block {
	t.Helper()
	var run []block
	var skipped []string
	for _, b := range p.blocks {
		isShell := shellLangs[b.lang] || b.hidden
		if b.lang == "" && looksLikeCommands(b.firstLine()) {
			t.Errorf("%s: a block of commands without an info string: mark it ```console or ```sh (and run it, or give it a doctest: skip), or ```text if it is not commands", b)
			continue
		}
		switch {
		case b.skip != "":
			if !isShell {
				t.Errorf("%s: doctest: skip on a ```%s block, which is never run anyway", b, b.lang)
			}
			skipped = append(skipped, b.firstLine())
		case b.background && b.lang != "console":
			t.Errorf("%s: doctest: background needs a ```console block with one command", b)
		case isShell:
			run = append(run, b)
		}
	}
	want := notRun[p.file]
	for _, s := range skipped {
		if !slices.Contains(want, s) {
			t.Errorf("%s: a block starting %q is marked doctest: skip but is not in notRun; add it there with the reason, or run it", p.file, s)
		}
	}
	for _, s := range want {
		if !slices.Contains(skipped, s) {
			t.Errorf("%s: notRun lists a block starting %q that the page does not mark doctest: skip (or no longer has)", p.file, s)
		}
	}
	return run
}

// The addresses the pages use: those of `make run` and idemd's defaults,
// then those of the example APIs that docs/idempotent-http.md starts. A
// page's commands get free ports instead, and their output gets these back.
var docAddrs = [6]string{"127.0.0.1:7070", "127.0.0.1:7071", "127.0.0.1:7072", "127.0.0.1:8080", "127.0.0.1:8081", "127.0.0.1:8082"}

type env struct {
	dir    string   // where the commands run
	vars   []string // their environment
	addrs  [len(docAddrs)]string
	toPage *strings.Replacer // the page's addresses to this run's
	toDoc  *strings.Replacer // and back
}

func runPage(t *testing.T, p *page) {
	blocks := runnable(t, p)
	if t.Failed() || len(blocks) == 0 {
		return
	}
	scratch := t.TempDir()
	e := &env{dir: scratch}
	if p.file == "README.md" {
		e.dir = repoRoot // make run, make install: the README's commands run in the clone
	}
	var pairsTo, pairsBack []string
	for i := range e.addrs {
		e.addrs[i] = freeAddr(t)
		pairsTo = append(pairsTo, docAddrs[i], e.addrs[i])
		pairsBack = append(pairsBack, e.addrs[i], docAddrs[i])
		pairsTo = append(pairsTo, strings.Replace(docAddrs[i], "127.0.0.1", "localhost", 1), strings.Replace(e.addrs[i], "127.0.0.1", "localhost", 1))
	}
	e.toPage, e.toDoc = strings.NewReplacer(pairsTo...), strings.NewReplacer(pairsBack...)
	gobin := filepath.Join(scratch, "gobin")
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "IDEM_"), strings.HasPrefix(k, "OTEL_"),
			k == "MAKEFLAGS", k == "MAKELEVEL", k == "MFLAGS", k == "MAKEOVERRIDES", k == "PATH", k == "GOBIN":
			continue
		}
		e.vars = append(e.vars, kv)
	}
	e.vars = append(e.vars,
		"PATH="+pagePath(p.file, gobin),
		"GOBIN="+gobin,
		"IDEM_LISTEN="+e.addrs[0], "IDEM_HTTP_LISTEN="+e.addrs[1], "IDEM_JSON_LISTEN="+e.addrs[2],
		"IDEM_ADDR="+e.addrs[0],
		"IDEM_DATA_DIR="+filepath.Join(scratch, "idem-data"),
		"TMPDIR="+scratch,        // mktemp, for the files a page's commands write
		"DOCTEST_REPO="+repoRoot, // for a page's hidden set-up, such as a link to the clone
	)
	if p.postgres {
		db := testdb.New(t, testdb.MaxConns(1))
		e.vars = append(e.vars, "IDEM_DATABASE_URL="+db.URL)
	}
	// The page talks to an idemd as `make run` starts it until it starts
	// one of its own.
	stopDefault := func() {}
	if !blocks[0].background {
		stopDefault = startDefaultIdemd(t, e)
	}
	sh := startShell(t, e)
	for _, b := range blocks {
		if missing := missingCommands(b.needs); len(missing) > 0 {
			// As make test does for the TypeScript and Python tests: run
			// without them here, never in CI.
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s: needs %s, which is not on the PATH; in CI (CI=true) every block runs", b, strings.Join(missing, " and "))
			}
			t.Logf("NOTICE: %s: %s not on the PATH: this block DID NOT RUN", b, strings.Join(missing, " and "))
			continue
		}
		switch {
		case b.background:
			stopDefault()
			stopDefault = func() {}
			startBackground(t, e, b)
		case b.lang == "console":
			steps, err := parseConsole(b)
			if err != nil {
				t.Fatal(err)
			}
			runConsole(t, e, sh, b, steps)
			if b.twice {
				runConsole(t, e, sh, b, steps)
			}
		default: // sh, or a hidden doctest: run
			script := filepath.Join(scratch, fmt.Sprintf("block-%d.sh", b.line))
			if err := os.WriteFile(script, []byte(e.toPage.Replace(b.text)+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			out, status, err := sh.run("set -e\n. "+shellQuote(script)+"\nset +e", 5*time.Minute)
			if err != nil || status != 0 {
				t.Fatalf("%s: the block failed (status %d, %v):\n%s\noutput:\n%s", b, status, err, b.text, out)
			}
		}
	}
}

// commandWords start the lines of a block that holds commands.
var commandWords = regexp.MustCompile(`^(\$ |(make|go|idem|idemd|idem-bench|curl|grpcurl|kubectl|docker|systemctl|git|node|npm|python3?|pip|psql|sudo|cd|export)( |$))`)

// looksLikeCommands says whether a block without an info string starts with
// a command, so that it cannot escape the rule that commands are run.
func looksLikeCommands(firstLine string) bool { return commandWords.MatchString(firstLine) }

// pagePath is the PATH a page's commands run with: gobin, where `make
// install` puts idemd and idem; then, but for the README, which gets them as
// it tells a reader to (make run, make install), binDir; then this
// machine's PATH without its directories that hold an idemd or idem, so
// that no binary installed earlier stands in for this tree's.
func pagePath(file, gobin string) string {
	dirs := []string{gobin}
	if file != "README.md" {
		dirs = append(dirs, binDir)
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if !isExecutable(filepath.Join(d, "idemd")) && !isExecutable(filepath.Join(d, "idem")) {
			dirs = append(dirs, d)
		}
	}
	return strings.Join(dirs, string(os.PathListSeparator))
}

// missingCommands are those of cmds that are not on the PATH.
func missingCommands(cmds []string) []string {
	var missing []string
	for _, c := range cmds {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	return missing
}

func isExecutable(file string) bool {
	fi, err := os.Stat(file)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// runConsole runs a console block's commands in the page's shell and
// compares what each prints with what the page shows.
func runConsole(t *testing.T, e *env, sh *shell, b block, steps []step) {
	t.Helper()
	for i, s := range steps {
		t.Logf("%s:%d: $ %s", b.file, s.line, s.cmd)
		out, status, err := sh.run(e.toPage.Replace(s.cmd), 5*time.Minute)
		got := trimBlankTail(strings.Split(e.toDoc.Replace(out), "\n"))
		if len(got) == 1 && got[0] == "" {
			got = nil
		}
		if err != nil {
			t.Fatalf("%s:%d: %s: %v\noutput:\n%s", b.file, s.line, s.cmd, err, out)
		}
		if !matchLines(s.want, got) {
			t.Fatalf("%s:%d: %s\nthe page shows:\n%s\nit printed:\n%s", b.file, s.line, s.cmd, strings.Join(s.want, "\n"), strings.Join(got, "\n"))
		}
		if status != 0 && (i+1 == len(steps) || !strings.Contains(steps[i+1].cmd, "$?")) {
			t.Fatalf("%s:%d: %s exited %d; a command that fails on purpose is followed by one that shows $?", b.file, s.line, s.cmd, status)
		}
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// freeAddr is a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startDefaultIdemd runs the idemd a page talks to until it starts a server
// of its own: `idemd serve` with its defaults but the addresses, as `make
// run` does. It returns a function that stops it.
func startDefaultIdemd(t *testing.T, e *env) (stopIt func()) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "idemd"), "serve")
	cmd.Dir, cmd.Env = e.dir, e.vars
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var once sync.Once
	stopIt = func() { once.Do(func() { stop(cmd, exited) }) }
	t.Cleanup(stopIt)
	waitReady(t, e, exited, &log)
	return stopIt
}

// waitReady waits for /readyz of the page's idemd.
func waitReady(t *testing.T, e *env, exited <-chan struct{}, log *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + e.addrs[1] + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("idemd exited before it was ready:\n%s", log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("idemd not ready after a minute (%v):\n%s", err, log.String())
		}
	}
}

// startBackground starts the one command of a background block (a server,
// such as `make run`), waits until it has printed what the page shows and
// its idemd is ready, and stops it with SIGINT when the page is done.
func startBackground(t *testing.T, e *env, b block) {
	t.Helper()
	steps, err := parseConsole(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 {
		t.Fatalf("%s: a background block has one command; this one has %d", b, len(steps))
	}
	s := steps[0]
	cmd := exec.Command("bash", "--noprofile", "--norc", "-c", e.toPage.Replace(s.cmd))
	cmd.Dir, cmd.Env = e.dir, e.vars
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { stop(cmd, exited) })

	// A cold `make run` compiles idemd first: give it the time a first
	// build takes on a small machine.
	deadline := time.Now().Add(10 * time.Minute)
	for {
		got := strings.Split(e.toDoc.Replace(out.String()), "\n")
		complete := got[:len(got)-1] // the last element is a line still being written
		if matchLines(s.want, complete) {
			break
		}
		select {
		case <-exited:
			t.Fatalf("%s:%d: %s exited before it printed what the page shows:\n%s\nit printed:\n%s", b.file, s.line, s.cmd, strings.Join(s.want, "\n"), strings.Join(complete, "\n"))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s:%d: %s has not printed what the page shows after 10 minutes:\n%s\nit printed:\n%s", b.file, s.line, s.cmd, strings.Join(s.want, "\n"), strings.Join(complete, "\n"))
		}
	}
	waitReady(t, e, exited, &out)
}

// stop interrupts a process group and waits for it, killing it if it does
// not end within half a minute.
func stop(cmd *exec.Cmd, exited <-chan struct{}) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

// A shell is one bash process that runs a page's commands one after
// another, so that a variable one command sets is there for the next, as in
// a terminal.
type shell struct {
	stdin *os.File
	mark  string
	out   syncBuffer
	done  chan struct{} // closed when bash has exited
}

func startShell(t *testing.T, e *env) *shell {
	t.Helper()
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir, cmd.Env = e.dir, e.vars
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	sh := &shell{stdin: stdinW, mark: "__doctest_" + strconv.FormatInt(time.Now().UnixNano(), 36), done: make(chan struct{})}
	cmd.Stdin = stdinR
	cmd.Stdout, cmd.Stderr = &sh.out, &sh.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdinR.Close()
	go func() { _ = cmd.Wait(); close(sh.done) }()
	t.Cleanup(func() {
		stdinW.Close() // bash reads EOF and exits
		select {
		case <-sh.done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-sh.done
		}
	})
	return sh
}

// run runs one command and returns what it printed (stdout and stderr, as a
// terminal shows them) and its exit status.
func (sh *shell) run(command string, timeout time.Duration) (string, int, error) {
	wrapped := "{ " + command + "\n} </dev/null 2>&1; __doctest_status=$?; printf '\\n%s %d\\n' " + sh.mark +
		" \"$__doctest_status\"; (exit \"$__doctest_status\")\n"
	if _, err := sh.stdin.WriteString(wrapped); err != nil {
		return sh.out.take(), -1, fmt.Errorf("the shell is gone: %w", err)
	}
	end := regexp.MustCompile(`\n` + sh.mark + ` (\d+)\n`)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		if out, status, ok := sh.out.takeUntil(end); ok {
			return out, status, nil
		}
		select {
		case <-sh.done:
			if out, status, ok := sh.out.takeUntil(end); ok {
				return out, status, nil
			}
			return sh.out.take(), -1, errors.New("the shell exited")
		case <-ctx.Done():
			return sh.out.take(), -1, fmt.Errorf("no answer after %v", timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// syncBuffer is a bytes.Buffer that a process writes to while a test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) take() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	b.buf.Reset()
	return s
}

// takeUntil takes the text before end's first match and the number end
// captures, and drops the match.
func (b *syncBuffer) takeUntil(end *regexp.Regexp) (string, int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	m := end.FindStringSubmatchIndex(s)
	if m == nil {
		return "", 0, false
	}
	status, _ := strconv.Atoi(s[m[2]:m[3]])
	b.buf.Reset()
	b.buf.WriteString(s[m[1]:])
	return s[:m[0]], status, true
}
