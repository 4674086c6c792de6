package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"google.golang.org/grpc"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
)

// Resolution is a resolver's answer about one held record: Completed,
// Failed, Release or CantTell.
type Resolution struct {
	kind   resolutionKind
	result []byte
	err    string
	// Reason is why, in a few words ("charge ch_123 found"), kept on the
	// record's timeline and in idemd's log; may be empty.
	Reason string
}

type resolutionKind int

const (
	cantTell resolutionKind = iota
	resolveCompleted
	resolveFailed
	resolveReleased
)

// Completed says the effect happened: the record becomes COMPLETED with
// result, which every later Claim replays.
func Completed(result []byte) Resolution { return Resolution{kind: resolveCompleted, result: result} }

// Failed says the job failed for good: the record becomes FAILED with the
// error text, which every later Claim replays.
func Failed(text string) Resolution { return Resolution{kind: resolveFailed, err: text} }

// Release says the effect did not happen: the record becomes RELEASED and
// the next Claim runs the job again.
func Release() Resolution { return Resolution{kind: resolveReleased} }

// CantTell leaves the record held for a person (or for the resolver's next
// look, after its RetryInterval).
func CantTell() Resolution { return Resolution{kind: cantTell} }

// Because returns r with its Reason set.
func (r Resolution) Because(reason string) Resolution {
	r.Reason = reason
	return r
}

// ResolveRequest is a resolver's decision about one held record.
type ResolveRequest struct {
	Namespace string
	Key       string
	// Token is the token the record was delivered with, so that a decision
	// about one lease is never applied to another.
	Token int64
	// Resolver names the resolver: 1 to 128 bytes of UTF-8 without control
	// characters, kept on the record's timeline and in idemd's log.
	Resolver   string
	Resolution Resolution
}

// Resolve decides an UNRESOLVED record, in one RPC without retries, and
// returns the record as the decision left it. Errors: ErrNotUnresolved
// (someone decided first; a decision equal to the winner's is answered as
// done instead), ErrLeaseLost (the record holds another token),
// ErrNotFound, and the reasons INVALID_RESOLVER and INVALID_REASON. A
// CantTell resolution is refused without an RPC: it decides nothing.
func (c *Client) Resolve(ctx context.Context, req ResolveRequest, opts ...grpc.CallOption) (Record, error) {
	p := &idemv1.ResolveRequest{Namespace: req.Namespace, Key: req.Key, Token: req.Token, Resolver: req.Resolver, Reason: req.Resolution.Reason}
	switch r := req.Resolution; r.kind {
	case resolveCompleted:
		p.Resolution = &idemv1.ResolveRequest_Completed{Completed: &idemv1.ResolveCompleted{Result: r.result}}
	case resolveFailed:
		p.Resolution = &idemv1.ResolveRequest_Failed{Failed: &idemv1.ResolveFailed{Error: r.err}}
	case resolveReleased:
		p.Resolution = &idemv1.ResolveRequest_Released{Released: &idemv1.ResolveReleased{}}
	default:
		return Record{}, errors.New("idem: Resolve needs Completed, Failed or Release; CantTell decides nothing")
	}
	resp, err := c.resolver.Resolve(ctx, p, opts...)
	if err != nil {
		return Record{}, decodeError(ctx, err)
	}
	return recordFromProto(resp.GetRecord()), nil
}

// ResolverOptions configure RunResolver.
type ResolverOptions struct {
	// Name is the resolver's name, kept on every record it decides
	// (required; see ResolveRequest.Resolver).
	Name string
	// Namespaces are the namespaces it watches; none means every namespace
	// the tenant's allow-list admits.
	Namespaces []string
	// RetryInterval is how long a record the function could not tell about
	// waits before it is asked about again. It defaults to 1 minute.
	RetryInterval time.Duration
	// Logger gets what the loop cannot return: the function's errors and
	// panics, refused decisions, a lost stream. It defaults to
	// slog.Default().
	Logger *slog.Logger
}

// RunResolver decides held (UNRESOLVED) records until ctx is done, and then
// returns nil. It watches the tenant's held records (WatchHeld), those held
// when it starts and each one as it becomes held, and calls fn with each
// record, one at a time: rec.Steps and rec.StepKey tell fn what to look up
// downstream. It sends fn's Completed, Failed or Release with Resolve under
// opts.Name; a record fn answers CantTell, returns an error or panics about
// stays held, and fn is asked again only after opts.RetryInterval. A record
// someone else decided first (NOT_UNRESOLVED) is not an error. A lost
// stream is opened again with the client's backoff. It returns an error
// only for options it cannot run with.
func (c *Client) RunResolver(ctx context.Context, opts ResolverOptions, fn func(ctx context.Context, rec Record) (Resolution, error)) error {
	if opts.Name == "" {
		return errors.New("idem: RunResolver needs a resolver Name")
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := &resolverLoop{c: c, opts: opts, fn: fn, held: map[heldID]Record{}, due: map[heldID]time.Time{}}
	events := make(chan heldEvent)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go c.watchHeld(watchCtx, opts, events)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		next := r.askDue(ctx)
		if ctx.Err() != nil {
			return nil
		}
		timer.Reset(max(time.Until(next), 0))
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			r.apply(ev)
		case <-timer.C:
		}
	}
}

// heldID is one lease of one record: a record held again is a new one.
type heldID struct {
	namespace, key string
	token          int64
}

func idOf(rec Record) heldID { return heldID{rec.Namespace, rec.Key, rec.Token} }

// heldEvent is what the stream said: a new stream (reset), a held record,
// the end of the first set (synced), a record that left, or a lost stream.
type heldEvent struct {
	reset, synced bool
	held          *Record
	left          *heldID
	err           error
}

type resolverLoop struct {
	c    *Client
	opts ResolverOptions
	fn   func(context.Context, Record) (Resolution, error)
	held map[heldID]Record    // held now, as the stream says
	due  map[heldID]time.Time // when a record fn could not tell about may be asked again
}

func (r *resolverLoop) apply(ev heldEvent) {
	switch {
	case ev.reset:
		clear(r.held) // the new stream sends the whole set again
	case ev.held != nil:
		r.held[idOf(*ev.held)] = *ev.held
	case ev.left != nil:
		delete(r.held, *ev.left)
		delete(r.due, *ev.left)
	case ev.synced:
		for id := range r.due {
			if _, ok := r.held[id]; !ok {
				delete(r.due, id) // decided while the stream was down
			}
		}
	case ev.err != nil:
		r.opts.Logger.Warn("idem resolver: the stream of held records broke; opening it again", "resolver", r.opts.Name, "error", ev.err)
	}
}

// askDue asks fn about every held record that is due, and returns when the
// next one that is not will be (far away when none).
func (r *resolverLoop) askDue(ctx context.Context) time.Time {
	next := time.Now().Add(time.Hour)
	for id, rec := range r.held {
		if ctx.Err() != nil {
			return next
		}
		if at, waiting := r.due[id]; waiting && time.Now().Before(at) {
			next = minTime(next, at)
			continue
		}
		if r.decide(ctx, rec) {
			delete(r.held, id)
			delete(r.due, id)
			continue
		}
		r.due[id] = time.Now().Add(r.opts.RetryInterval)
		next = minTime(next, r.due[id])
	}
	return next
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// decide asks fn about rec and sends its decision; it reports whether rec
// is settled for this loop (decided, by it or by someone else).
func (r *resolverLoop) decide(ctx context.Context, rec Record) bool {
	log := r.opts.Logger.With("resolver", r.opts.Name, "namespace", rec.Namespace, "key", rec.Key, "token", rec.Token)
	res, err := r.ask(ctx, rec)
	switch {
	case err != nil && ctx.Err() != nil:
		return false // stopping: not the function's failure
	case err != nil:
		log.Error("idem resolver: the function failed; leaving the record held", "error", err)
		return false
	case res.kind == cantTell:
		return false
	}
	_, err = retry(ctx, r.c, retryLimit{attempts: r.c.retry.MaxAttempts}, func(ctx context.Context) (Record, error) {
		return r.c.Resolve(ctx, ResolveRequest{Namespace: rec.Namespace, Key: rec.Key, Token: rec.Token, Resolver: r.opts.Name, Resolution: res})
	})
	switch {
	case err == nil, errors.Is(err, ErrNotUnresolved), errors.Is(err, ErrLeaseLost), errors.Is(err, ErrNotFound):
		return true // decided, or no longer this lease's to decide
	case ctx.Err() != nil:
		return false
	}
	log.Error("idem resolver: Resolve was refused; leaving the record held", "error", err)
	return false
}

// ask calls fn, turning a panic into an error.
func (r *resolverLoop) ask(ctx context.Context, rec Record) (res Resolution, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return r.fn(ctx, rec)
}

// watchHeld streams the held records into events until ctx is done,
// opening the stream again with the client's backoff when it breaks.
func (c *Client) watchHeld(ctx context.Context, opts ResolverOptions, events chan<- heldEvent) {
	send := func(ev heldEvent) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for failures := 0; ctx.Err() == nil; {
		synced, err := c.watchOnce(ctx, opts.Namespaces, send)
		if ctx.Err() != nil {
			return
		}
		if synced {
			failures = 0 // it worked for a while: start the backoff over
		}
		if !send(heldEvent{err: err}) || !c.pause(ctx, c.retry.backoff(failures, err)) {
			return
		}
		failures++
	}
}

// watchOnce runs one WatchHeld stream until it ends, and reports whether
// it got as far as synced.
func (c *Client) watchOnce(ctx context.Context, namespaces []string, send func(heldEvent) bool) (synced bool, err error) {
	stream, err := c.resolver.WatchHeld(ctx, &idemv1.WatchHeldRequest{Namespaces: namespaces})
	if err != nil {
		return false, decodeError(ctx, err)
	}
	if !send(heldEvent{reset: true}) {
		return false, nil
	}
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			return synced, errors.New("idem: the server ended the stream of held records")
		}
		if err != nil {
			return synced, decodeError(ctx, err)
		}
		var ev heldEvent
		switch e := msg.GetEvent().(type) {
		case *idemv1.WatchHeldResponse_Held:
			rec := recordFromProto(e.Held)
			ev.held = &rec
		case *idemv1.WatchHeldResponse_Synced:
			ev.synced, synced = true, true
		case *idemv1.WatchHeldResponse_Left:
			ev.left = &heldID{e.Left.GetNamespace(), e.Left.GetKey(), e.Left.GetToken()}
		default:
			continue
		}
		if !send(ev) {
			return synced, nil
		}
	}
}
