package store

import (
	"bytes"
	"context"
)

// TokenCallKind names one of the three calls that must present the record's
// current token.
type TokenCallKind int

// The token-bearing calls.
const (
	CallComplete TokenCallKind = iota + 1
	CallFail
	CallHeartbeat
)

// TokenCall is a Complete, Fail or Heartbeat as a store runs it: an update
// that applies only with the record's current token while the record is
// PROCESSING, EXPIRED or UNRESOLVED (nobody took it over, so its holder
// still resolves it). When the update applies nothing, the store reads the
// record and Settle decides the answer, the same way for every store.
type TokenCall struct {
	Kind  TokenCallKind
	ID    RecordID
	Token int64
	// Args are the values the call writes, in the order its statement binds
	// them after the record's id and the token: for Complete the result
	// (never nil: a Complete without a result stores an empty one, so a
	// COMPLETED record always has a result); for Fail the error text, then
	// whether it is retryable; for Heartbeat the new lease in microseconds.
	Args []any
}

// Call is the TokenCall of RecordComplete.
func (p *CompleteParams) Call() *TokenCall {
	result := p.Result
	if result == nil {
		result = []byte{}
	}
	return &TokenCall{Kind: CallComplete, ID: p.RecordID, Token: p.Token, Args: []any{result}}
}

// Call is the TokenCall of RecordFail.
func (p *FailParams) Call() *TokenCall {
	return &TokenCall{Kind: CallFail, ID: p.RecordID, Token: p.Token, Args: []any{p.Error, p.Retryable}}
}

// Call is the TokenCall of RecordHeartbeat.
func (p *HeartbeatParams) Call() *TokenCall {
	return &TokenCall{Kind: CallHeartbeat, ID: p.RecordID, Token: p.Token, Args: []any{p.LeaseTTL.Microseconds()}}
}

// Settle answers a token call whose update applied nothing, from rec, the
// record as it stands (DESIGN §1, the rule for token-bearing calls):
//   - another token: ErrLeaseLost, whatever the state;
//   - the current token on the record this very call produced earlier, the
//     same kind of call with the same value (a Complete with the result
//     bytes its COMPLETED record holds; a Fail with the error its FAILED or
//     RELEASED record holds, and retryable as the state says): rec,
//     unchanged, so that a retry after a lost response succeeds;
//   - the current token on a record an operator resolved (RecordResolve),
//     and not the value the resolution stored: ErrResolvedByOperator, so
//     that the holder learns its value was not stored, and why;
//   - the current token on a record that left PROCESSING, EXPIRED and
//     UNRESOLVED some other way (another kind of call, another value):
//     ErrAlreadyTerminal.
//
// It returns nil and no error when the update should have applied to rec:
// the record changed between the update and the read, and the store decides
// what that means (Postgres runs the call again; on SQLite, where both ran
// under one lock, it cannot happen).
func (c *TokenCall) Settle(rec *Record) (*Record, error) {
	switch {
	case rec.Token != c.Token:
		return nil, ErrLeaseLost
	case c.repeats(rec):
		return rec, nil
	case rec.State == StateProcessing || rec.State == StateExpired || rec.State == StateUnresolved:
		return nil, nil
	case rec.ResolvedByOperator:
		return nil, ErrResolvedByOperator
	}
	return nil, ErrAlreadyTerminal
}

// repeats reports whether rec, holding the caller's token, is what this
// call produced: the state its kind leaves, with the value it carries.
func (c *TokenCall) repeats(rec *Record) bool {
	switch c.Kind {
	case CallComplete:
		result, _ := c.Args[0].([]byte)
		return rec.State == StateCompleted && bytes.Equal(rec.Result, result)
	case CallFail:
		errText, _ := c.Args[0].(string)
		retryable, _ := c.Args[1].(bool)
		want := StateFailed
		if retryable {
			want = StateReleased
		}
		return rec.State == want && rec.Error == errText
	}
	return false
}

// TokenCalls runs TokenCalls. A store embeds it, set to its own runner, and
// so implements RecordComplete, RecordFail and RecordHeartbeat the same way
// as every other store: each checks its text (CheckText), then builds its
// TokenCall and runs it.
type TokenCalls func(ctx context.Context, call *TokenCall) (*Record, error)

// RecordComplete implements Store.
func (run TokenCalls) RecordComplete(ctx context.Context, p *CompleteParams) (*Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return run(ctx, p.Call())
}

// RecordFail implements Store.
func (run TokenCalls) RecordFail(ctx context.Context, p *FailParams) (*Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return run(ctx, p.Call())
}

// RecordHeartbeat implements Store.
func (run TokenCalls) RecordHeartbeat(ctx context.Context, p *HeartbeatParams) (*Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	return run(ctx, p.Call())
}
