package main

import (
	"bytes"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/idemhq/idem/internal/testsupport/testdb"
)

// dialUnread opens a connection to addr that reads nothing, with a small
// receive buffer so that the server's writes to it block soon.
func dialUnread(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10) }); cerr != nil {
			return cerr
		}
		return err
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// holdHTTP1 pipelines GETs of path on conn and never reads an answer. The
// returned channel gets the error that ended its writes: once the server
// stops reading (its answers wait for this client), only the server
// cutting the connection ends them.
func holdHTTP1(conn net.Conn, path string) <-chan error {
	cut := make(chan error, 1)
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: idem\r\n\r\n")
	go func() {
		for {
			if _, err := conn.Write(req); err != nil {
				cut <- err
				return
			}
		}
	}()
	return cut
}

// holdH2C opens streams GETs of path over HTTP/2 without TLS, with flow
// control windows that let the server send everything, and never reads.
// It then sends a connection WINDOW_UPDATE every 50ms, which asks for no
// answer: the returned channel gets the error that ended those writes, the
// server cutting the connection.
func holdH2C(conn net.Conn, path string, streams int) <-chan error {
	cut := make(chan error, 1)
	go func() {
		fr := http2.NewFramer(conn, nil)
		const window = 1 << 30
		if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
			cut <- err
			return
		}
		if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}); err != nil {
			cut <- err
			return
		}
		if err := fr.WriteWindowUpdate(0, window); err != nil {
			cut <- err
			return
		}
		var block bytes.Buffer
		enc := hpack.NewEncoder(&block)
		for _, hf := range []hpack.HeaderField{
			{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
			{Name: ":path", Value: path}, {Name: ":authority", Value: "idem"},
		} {
			_ = enc.WriteField(hf)
		}
		for i := range streams {
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
				cut <- err
				return
			}
		}
		for {
			time.Sleep(50 * time.Millisecond)
			if err := fr.WriteWindowUpdate(0, 1); err != nil {
				cut <- err
				return
			}
		}
	}()
	return cut
}

// TestJSONWriteTimeoutCutsAClientThatStopsReading: clients that fill every
// connection --json-max-connections allows with GETs of a 60 KB record and
// never read the answers (pipelined over HTTP/1.1, or as HTTP/2 streams)
// are cut off at --json-write-timeout, though a request is in flight (so
// the idle timeout never applies) and each was read long before the read
// timeout; then another client is served. A Claim that waits longer than
// the write timeout, with nothing to write meanwhile, is not cut.
func TestJSONWriteTimeoutCutsAClientThatStopsReading(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, testdb.Unmigrated())
	const slots = 2
	p := startJSONIdemd(t, db.URL, "--json-max-connections", "2", "--json-idle-timeout", "1s",
		"--json-read-timeout", "1s", "--json-write-timeout", "1s")
	base := "http://" + p.addrs.JSONListen
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	held := postJSON(c, base, "/idem.v1.IdempotencyService/Claim", `{"namespace":"jobs","key":"big"}`)
	token, _ := held.body["record"].(map[string]any)["token"].(string)
	if held.status != http.StatusOK || token == "" {
		t.Fatalf("Claim: %d %s %v", held.status, held.raw, held.err)
	}
	result := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("r"), 60<<10))
	if a := postJSON(c, base, "/idem.v1.IdempotencyService/Complete", `{"namespace":"jobs","key":"big","token":"`+token+`","result":"`+result+`"}`); a.status != http.StatusOK {
		t.Fatalf("Complete: %d %.200s %v", a.status, a.raw, a.err)
	}
	const path = "/v1/namespaces/jobs/records/big"

	for _, tc := range []struct {
		name string
		hold func(net.Conn) <-chan error
	}{
		{"HTTP/1.1 pipelined", func(conn net.Conn) <-chan error { return holdHTTP1(conn, path) }},
		{"h2c streams", func(conn net.Conn) <-chan error { return holdH2C(conn, path, 100) }},
	} {
		var cuts []<-chan error
		for range slots {
			cuts = append(cuts, tc.hold(dialUnread(t, p.addrs.JSONListen)))
		}
		for i, cut := range cuts {
			select {
			case err := <-cut:
				t.Logf("%s: client %d cut off: %v", tc.name, i, err)
			case <-time.After(30 * time.Second):
				// A safety net far above the 1s timeouts.
				t.Fatalf("%s: client %d, which reads nothing, still holds its connection after 30s", tc.name, i)
			}
		}
		// Every slot is free again: a client that reads is served.
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: a Lookup after the cut: %v", tc.name, err)
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || !strings.Contains(string(raw), result) {
			t.Fatalf("%s: a Lookup after the cut: %d, %d bytes, %v; want 200 with the result", tc.name, resp.StatusCode, len(raw), err)
		}
	}

	if a := postJSON(c, base, "/idem.v1.IdempotencyService/Claim", `{"namespace":"jobs","key":"waited","leaseTtl":"60s"}`); a.status != http.StatusOK {
		t.Fatalf("Claim: %d %s %v", a.status, a.raw, a.err)
	}
	a := postJSON(c, base, "/idem.v1.IdempotencyService/Claim", `{"namespace":"jobs","key":"waited","wait":"3s"}`)
	if a.status != http.StatusOK || a.body["outcome"] != "OUTCOME_IN_PROGRESS" {
		t.Fatalf("a Claim waiting 3s with a write timeout of 1s: %d %s %v; want 200 IN_PROGRESS", a.status, a.raw, a.err)
	}
}
