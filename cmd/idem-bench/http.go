package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/client/idemhttp"
)

// httpTarget does a job as a client of an idempotent HTTP API does: a POST
// with an Idempotency-Key to an HTTP server in this process whose handler
// does nothing but answer 201 with --result-bytes of body. The http target
// puts client/idemhttp in front of the handler, on an idemd of its own (as
// the service target has); http-plain is the same server without it, so
// that the two compare the middleware's cost with nothing else between
// them.
type httpTarget struct {
	label  string
	url    string
	srv    *http.Server
	client *http.Client
	// svc is the idemd the middleware claims in; nil for http-plain.
	svc *serviceTarget
}

// newHTTPTarget serves the handler, behind the middleware on svc's client
// when svc is not nil, on a loopback port, and makes an HTTP client of it
// with a kept-alive connection for each of workers.
func (c *cli) newHTTPTarget(label string, svc *serviceTarget, result []byte, workers int) (*httpTarget, error) {
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(result)
	})
	if svc != nil {
		mw, err := idemhttp.New(svc.client, idemhttp.Config{
			Namespace: c.Namespace,
			Caller:    func(*http.Request) (string, error) { return "bench", nil },
			LeaseTTL:  c.LeaseTTL,
		})
		if err != nil {
			return nil, err
		}
		h = mw(h)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &httpTarget{
		label: label,
		url:   "http://" + l.Addr().String() + "/payments",
		srv:   &http.Server{Handler: h, ReadHeaderTimeout: time.Minute},
		client: &http.Client{Transport: &http.Transport{
			MaxIdleConns: workers, MaxIdleConnsPerHost: workers, IdleConnTimeout: time.Minute,
		}},
		svc: svc,
	}
	go func() { _ = t.srv.Serve(l) }()
	return t, nil
}

func (t *httpTarget) name() string { return t.label }

func (t *httpTarget) job(ctx context.Context, key string) (outcome, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, strings.NewReader("{}"))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", strconv.Quote(key))
	start := time.Now()
	resp, err := t.client.Do(req)
	if err != nil {
		return 0, time.Since(start), err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	switch {
	case err != nil:
		return 0, took, err
	case resp.StatusCode == http.StatusCreated && resp.Header.Get("Idempotent-Replayed") == "true":
		return outcomeReplayed, took, nil
	case resp.StatusCode == http.StatusCreated:
		return outcomeAcquired, took, nil
	case resp.StatusCode == http.StatusConflict:
		return outcomeInProgress, took, nil
	}
	return 0, took, fmt.Errorf("POST %s answered %s", t.url, resp.Status)
}

func (t *httpTarget) close(ctx context.Context) error {
	err := t.srv.Shutdown(ctx)
	t.client.CloseIdleConnections()
	if t.svc != nil {
		err = errors.Join(err, t.svc.close(ctx))
	}
	return err
}

// The started idemd's process, connections and pool are the http target's,
// as they are the service target's.

func (t *httpTarget) pgApp() string {
	if t.svc == nil {
		return ""
	}
	return t.svc.pgApp()
}

func (t *httpTarget) processPIDs() []uint32 {
	if t.svc == nil {
		return nil
	}
	return t.svc.processPIDs()
}

func (t *httpTarget) poolAcquires(ctx context.Context) (int64, time.Duration) {
	if t.svc == nil {
		return 0, 0
	}
	return t.svc.poolAcquires(ctx)
}
