package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// startIdemd starts the idemd binary on a loopback port against a fresh
// schema of databaseURL (idemd migrates it), and returns its address and a
// function that stops it and drops the schema.
func startIdemd(ctx context.Context, bin, databaseURL string, log io.Writer) (string, func(), error) {
	if _, err := os.Stat(bin); err != nil {
		return "", nil, fmt.Errorf("no idemd at %s (run `make build`, pass -idemd, or pass -idem-addr of a running idemd): %w", bin, err)
	}
	setup, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(setup, databaseURL)
	if err != nil {
		return "", nil, fmt.Errorf("no database answers at %s (set IDEM_DATABASE_URL or -database-url): %w", redact(databaseURL), err)
	}
	var buf [6]byte
	_, _ = rand.Read(buf[:])
	schema := "idem_payments_" + hex.EncodeToString(buf[:])
	if _, err := admin.Exec(setup, "CREATE SCHEMA "+schema); err != nil {
		admin.Close(context.WithoutCancel(ctx))
		return "", nil, fmt.Errorf("create schema: %w", err)
	}
	dropSchema := func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(c, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			fmt.Fprintf(log, "payments: drop schema %s: %v\n", schema, err)
		}
		admin.Close(c)
	}

	u, err := url.Parse(databaseURL)
	if err != nil {
		dropSchema()
		return "", nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()

	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--http-listen", "", "--json-listen", "", "--database-url", u.String(), "--sweep-interval", "1s", "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		dropSchema()
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		dropSchema()
		return "", nil, fmt.Errorf("start idemd: %w", err)
	}
	addr := make(chan string, 1)
	logDone := make(chan struct{}) // idemd closed its stderr: it exited
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-logDone:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-logDone
		}
		_ = cmd.Wait() // after the last read of stderr, as os/exec requires
		dropSchema()
	}
	var early []string // what idemd said before it served, for the error if it never does
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		serving := false
		for sc.Scan() {
			var line struct {
				Level  string `json:"level"`
				Msg    string `json:"msg"`
				Listen string `json:"listen"`
			}
			_ = json.Unmarshal(sc.Bytes(), &line)
			switch {
			case !serving && line.Msg == "idemd serving":
				serving = true
				addr <- line.Listen
			case !serving:
				early = append(early, sc.Text())
			case line.Level == "ERROR":
				fmt.Fprintln(log, "idemd:", sc.Text())
			}
		}
		close(addr)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			stop()
			return "", nil, fmt.Errorf("idemd exited before serving:\n%s", strings.Join(early, "\n"))
		}
		return a, stop, nil
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, errors.New("idemd did not serve within 30s")
	}
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a database URL that does not parse)"
	}
	return u.Redacted()
}
