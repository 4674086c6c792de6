package store

import (
	"bytes"
	"context"
	"time"
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

func (k TokenCallKind) String() string {
	switch k {
	case CallComplete:
		return "complete"
	case CallFail:
		return "fail"
	case CallHeartbeat:
		return "heartbeat"
	}
	return "unknown"
}

// TokenCall is a Complete, Fail or Heartbeat as a store runs it: a change
// that applies only with the record's current token while the record is
// PROCESSING, EXPIRED or UNRESOLVED (nobody took it over, so its holder
// still resolves it). When the change applies to nothing, Decide says what
// the call is answered, the same way for every store.
type TokenCall struct {
	Kind TokenCallKind
	RecordID
	Token int64
	// Result is what a Complete stores; never nil, so that a COMPLETED
	// record always has a result (an empty one when the call had none).
	Result []byte
	// Error and Retryable are a Fail's.
	Error     string
	Retryable bool
	// LeaseTTL is a Heartbeat's new lease.
	LeaseTTL time.Duration
}

// Call is the TokenCall of RecordComplete.
func (p *CompleteParams) Call() *TokenCall {
	result := p.Result
	if result == nil {
		result = []byte{}
	}
	return &TokenCall{Kind: CallComplete, RecordID: p.RecordID, Token: p.Token, Result: result}
}

// Call is the TokenCall of RecordFail.
func (p *FailParams) Call() *TokenCall {
	return &TokenCall{Kind: CallFail, RecordID: p.RecordID, Token: p.Token, Error: p.Error, Retryable: p.Retryable}
}

// Call is the TokenCall of RecordHeartbeat.
func (p *HeartbeatParams) Call() *TokenCall {
	return &TokenCall{Kind: CallHeartbeat, RecordID: p.RecordID, Token: p.Token, LeaseTTL: p.LeaseTTL}
}

// ChangeAction is what a call that changes a record only under a condition
// (a token call, RecordResolve) is answered when its change applied to
// nothing.
type ChangeAction int

// The answers of a conditional change that changed nothing.
const (
	// ChangeRepeat: the record is what this very call produced earlier (a
	// retry after a lost response): the call is answered with the record,
	// unchanged.
	ChangeRepeat ChangeAction = iota + 1
	// ChangeRefuse: the call is refused with ChangeDecision.Err.
	ChangeRefuse
	// ChangeApplies: the change applies to the record as it now stands, so
	// the statement that skipped it saw an older version (a concurrent
	// change it waited for): the store runs the call again.
	ChangeApplies
)

// ChangeDecision is the verdict on a conditional change that changed
// nothing.
type ChangeDecision struct {
	Action ChangeAction
	// Err is the refusal when Action is ChangeRefuse.
	Err error
}

// Decide answers a token call whose change applied to nothing, from rec, the
// record as it stands (DESIGN §1, the rule for token-bearing calls):
//   - another token: ErrLeaseLost, whatever the state;
//   - the current token on the record this very call produced earlier, the
//     same kind of call with the same value (a Complete with the result
//     bytes its COMPLETED record holds; a Fail with the error its FAILED or
//     RELEASED record holds, and retryable as the state says): ChangeRepeat,
//     so that a retry after a lost response succeeds;
//   - the current token while the record is PROCESSING, EXPIRED or
//     UNRESOLVED: ChangeApplies;
//   - the current token on a record an operator resolved (RecordResolve),
//     and not the value the resolution stored: ErrResolvedByOperator, so
//     that the holder learns its value was not stored, and why;
//   - the current token on a record that left PROCESSING, EXPIRED and
//     UNRESOLVED some other way (another kind of call, another value):
//     ErrAlreadyTerminal.
func (c *TokenCall) Decide(rec *Record) ChangeDecision {
	switch {
	case rec.Token != c.Token:
		return ChangeDecision{Action: ChangeRefuse, Err: ErrLeaseLost}
	case c.repeats(rec):
		return ChangeDecision{Action: ChangeRepeat}
	case rec.State == StateProcessing || rec.State == StateExpired || rec.State == StateUnresolved:
		return ChangeDecision{Action: ChangeApplies}
	case rec.ResolvedByOperator:
		return ChangeDecision{Action: ChangeRefuse, Err: ErrResolvedByOperator}
	}
	return ChangeDecision{Action: ChangeRefuse, Err: ErrAlreadyTerminal}
}

// repeats reports whether rec, holding the caller's token, is what this
// call produced: the state its kind leaves, with the value it carries.
func (c *TokenCall) repeats(rec *Record) bool {
	switch c.Kind {
	case CallComplete:
		return rec.State == StateCompleted && bytes.Equal(rec.Result, c.Result)
	case CallFail:
		want := StateFailed
		if c.Retryable {
			want = StateReleased
		}
		return rec.State == want && rec.Error == c.Error
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
