// Package store defines idem's storage contract: the record, its states, the
// parameters of each operation and the errors a store returns. It imports
// neither gRPC nor the generated protobuf code, so that a second store or an
// operator tool can use it without the wire format.
package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Store is the storage behind idem. Every method touches one record addressed
// by its full primary key (tenant, namespace, key), except the sweeper's.
// Implementations must be safe for concurrent use.
//
// Every method that takes text (tenant, namespace, key, claimant, error)
// first checks it with the params' CheckText and returns its ErrInvalidText,
// reading and writing nothing, when a field is not UTF-8 or holds U+0000.
type Store interface {
	// RecordClaim inserts the record, takes over a RELEASED or EXPIRED record
	// or one whose lease ran out, or reports the existing record, atomically.
	// It returns ErrFingerprintMismatch when the stored fingerprint and
	// params.Fingerprint are both non-empty and differ.
	RecordClaim(ctx context.Context, params *ClaimParams) (*ClaimResult, error)
	// RecordClaimMany is RecordClaim for calls made at once (a batch
	// request): each call gets what RecordClaim would answer it, in the
	// order of params, and one call's error is its own. A store may send
	// them in one statement; calls of a record already among them are
	// answered as if they ran after it.
	RecordClaimMany(ctx context.Context, params []*ClaimParams) ([]*ClaimResult, []error)
	// RecordComplete stores the result of the record held with params.Token.
	RecordComplete(ctx context.Context, params *CompleteParams) (*Record, error)
	// RecordFail stores the error of the record held with params.Token and
	// makes it FAILED, or RELEASED when params.Retryable.
	RecordFail(ctx context.Context, params *FailParams) (*Record, error)
	// RecordHeartbeat extends the lease of the record held with params.Token.
	RecordHeartbeat(ctx context.Context, params *HeartbeatParams) (*Record, error)
	// RecordCompleteMany, RecordFailMany and RecordHeartbeatMany are the
	// calls above for calls made at once (a batch request): each call gets
	// what its unary method would answer it, in the order of params, as
	// RecordClaimMany's calls do. A store may send them in one statement.
	RecordCompleteMany(ctx context.Context, params []*CompleteParams) ([]*Record, []error)
	RecordFailMany(ctx context.Context, params []*FailParams) ([]*Record, []error)
	RecordHeartbeatMany(ctx context.Context, params []*HeartbeatParams) ([]*Record, []error)
	// RecordGet reads one record.
	RecordGet(ctx context.Context, id RecordID) (*Record, error)
	// RecordGetMany is RecordGet for many records at once (a batch
	// request): each id gets what RecordGet would answer it, in the order
	// of ids. A store may read them in one statement.
	RecordGetMany(ctx context.Context, ids []RecordID) ([]*Record, []error)
	// SweepExpire marks at most limit PROCESSING records whose lease ran out
	// as EXPIRED and returns how many it marked.
	SweepExpire(ctx context.Context, limit int) (int, error)
	// SweepPurge deletes at most limit records that are not PROCESSING and
	// whose expires_at has passed, and returns how many it deleted.
	SweepPurge(ctx context.Context, limit int) (int, error)
	// Ping reports whether the store can be reached.
	Ping(ctx context.Context) error

	// RecordList returns at most params.Limit records of one tenant, ordered
	// by namespace then key, starting after params.After.
	RecordList(ctx context.Context, params *ListParams) ([]*Record, error)
	// RecordDelete deletes one record whatever its state and returns it as it
	// was. The key's timeline keeps the deletion (Timeline).
	RecordDelete(ctx context.Context, params *DeleteParams) (*Record, error)
	// RecordResolve moves an UNRESOLVED record on as params.Resolution says,
	// keeping its token, and returns it with ResolvedByOperator set; its
	// timeline keeps who and why. A record that already is COMPLETED or
	// FAILED as params asks (a retry whose first answer was lost) is
	// returned as it is; one in any other state is ErrNotUnresolved; one
	// whose token is not params.Token, when set, is ErrLeaseLost.
	RecordResolve(ctx context.Context, params *ResolveParams) (*Record, error)
	// RecordStats counts one tenant's records per namespace and state.
	RecordStats(ctx context.Context, params *StatsParams) ([]StatsRow, error)
	// CountByState counts every tenant's records per state, for the sweeper's
	// gauge.
	CountByState(ctx context.Context) (map[State]int64, error)

	// Watcher wakes Claims that wait on a record (watch.go).
	Watcher

	// Steps (steps.go): the named steps of a job, recorded under its token.

	// RecordStep records a step of the record held with params.Token:
	// STARTED, or FINISHED with its result, and returns the step as stored.
	// It changes the record only where the token is current and the record
	// PROCESSING, EXPIRED or UNRESOLVED, the step is new or STARTED, and the
	// job's bounds hold; otherwise StepParams.Decide answers, and nothing is
	// written.
	RecordStep(ctx context.Context, params *StepParams) (*Step, error)
	// RecordStepMany is RecordStep for calls made at once, as
	// RecordCompleteMany is RecordComplete's.
	RecordStepMany(ctx context.Context, params []*StepParams) ([]*Step, []error)
	// Timeline keeps the exceptions in a record's life and hands held
	// records to resolvers (timeline.go).
	Timeline
}

// Backend is a Store as a process owns it: the operations, plus its schema,
// its metrics and its end. idemd runs on a Backend and never asks which one;
// each store package opens its own (postgres.OpenBackend, sqlite.Open).
type Backend interface {
	Store
	// Migrate applies the schema's pending migrations and returns the
	// versions it applied; none when the schema is up to date. A schema
	// newer than the binary's is refused or logged to logger, as the store
	// decides (store/migrate).
	Migrate(ctx context.Context, logger *slog.Logger) ([]int, error)
	// SchemaVersion is the newest migration applied to the database, 0 when
	// none is.
	SchemaVersion(ctx context.Context) (int, error)
	// LatestVersion is the schema version this binary expects.
	LatestVersion() int
	// Collectors are the backend's own metrics (a connection pool's
	// statistics, read at scrape time); nil when it has none.
	Collectors() []prometheus.Collector
	// Close releases the database. Calls made after it fail.
	Close() error
}

// State is where a record is in its life.
type State string

// The states of DESIGN §1. Their string values are what the database stores.
const (
	StateProcessing State = "processing"
	StateCompleted  State = "completed"
	StateFailed     State = "failed"
	StateReleased   State = "released"
	StateExpired    State = "expired"
	// StateUnresolved: the lease of a record held for resolution
	// (ClaimParams.Hold) ran out without a Complete or Fail. No Claim takes
	// it over; the holder's Complete or Fail, or RecordResolve, moves it on.
	StateUnresolved State = "unresolved"
)

// Outcome is the answer to a Claim.
type Outcome int

// The outcomes of a Claim.
const (
	OutcomeAcquired Outcome = iota + 1
	OutcomeInProgress
	OutcomeCompleted
	OutcomeFailed
	// OutcomeUnresolved: the record is UNRESOLVED, or this Claim found its
	// held lease run out and made it so. The Claim must not run the job.
	OutcomeUnresolved
)

func (o Outcome) String() string {
	switch o {
	case OutcomeAcquired:
		return "acquired"
	case OutcomeInProgress:
		return "in_progress"
	case OutcomeCompleted:
		return "completed"
	case OutcomeFailed:
		return "failed"
	case OutcomeUnresolved:
		return "unresolved"
	}
	return "unknown"
}

// RecordID addresses one record.
type RecordID struct {
	Tenant    string
	Namespace string
	Key       string
}

// Record is one idempotency record. Optional times are the zero time when
// unset. All times are in UTC and come from the store's clock.
type Record struct {
	RecordID
	State          State
	Token          int64
	Attempt        int32
	Claimant       string
	Fingerprint    []byte
	LeaseExpiresAt time.Time
	Retention      time.Duration
	Result         []byte
	Error          string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	CompletedAt    time.Time
	ExpiresAt      time.Time
	// Policy names the config file's policy that applied to the Claim that
	// last acquired the record (its namespace globs joined by commas); empty
	// when none did.
	Policy string
	// Hold is true when that policy holds the record for resolution when its
	// lease runs out (UNRESOLVED) instead of letting a Claim take it over.
	Hold bool
	// ResolvedByOperator is true when RecordResolve, not the holder, ended
	// the lease of the record's current token: the record is COMPLETED,
	// FAILED or RELEASED as an operator resolved it. The next acquisition,
	// with its new token, makes it false again.
	ResolvedByOperator bool
	// Steps are the job's steps (steps.go), in the order they were first
	// recorded; nil when it has none. Every read of the record carries them
	// (Claim, Get, List, Delete, Resolve); the token calls' answers, which
	// the common path reads back, leave them and HoldUnfinished unset.
	Steps []Step
	// HoldUnfinished is true when the policy of the record's latest step
	// call says on_unfinished_step: hold: a Claim that would take over the
	// record while a step is STARTED makes it UNRESOLVED instead.
	HoldUnfinished bool
}

// ClaimParams are the inputs of RecordClaim. The server has validated them
// and filled in defaults.
type ClaimParams struct {
	RecordID
	Fingerprint []byte
	Claimant    string
	LeaseTTL    time.Duration
	Retention   time.Duration
	// Policy is the name of the policy that applied, stored with the record
	// when the Claim acquires it; "" for none.
	Policy string
	// Hold, stored with the record when the Claim acquires it, makes a lease
	// that runs out without Complete or Fail UNRESOLVED instead of open to a
	// takeover.
	Hold bool
}

// Resolution is how RecordResolve moves an UNRESOLVED record on.
type Resolution int

// The resolutions of an UNRESOLVED record.
const (
	// ResolveCompleted makes it COMPLETED with ResolveParams.Result.
	ResolveCompleted Resolution = iota + 1
	// ResolveFailed makes it FAILED with ResolveParams.Error.
	ResolveFailed
	// ResolveReleased makes it RELEASED: the next Claim acquires it.
	ResolveReleased
)

// ResolveTarget is what RecordResolve writes: the new state, the result
// (nil unless COMPLETED, and never nil then) and the error text (kept only
// when FAILED).
type ResolveTarget struct {
	State  State
	Result []byte
	Error  string
}

// Target is what RecordResolve writes for p.
func (p *ResolveParams) Target() (ResolveTarget, error) {
	switch p.Resolution {
	case ResolveCompleted:
		result := p.Result
		if result == nil {
			result = []byte{}
		}
		return ResolveTarget{State: StateCompleted, Result: result}, nil
	case ResolveFailed:
		return ResolveTarget{State: StateFailed, Error: p.Error}, nil
	case ResolveReleased:
		return ResolveTarget{State: StateReleased}, nil
	}
	return ResolveTarget{}, fmt.Errorf("resolution %d is not a store.Resolution", p.Resolution)
}

// Decide answers a RecordResolve whose change applied to nothing (the
// record was not UNRESOLVED), from rec, the record as it stands:
//   - COMPLETED with the same result, or FAILED with the same error: a
//     RecordResolve whose answer was lost and is sent again finds the
//     record so, and is answered with it, as the first was (ChangeRepeat).
//     A release is not: the next Claim acquires a RELEASED record whoever
//     released it, so a release sent again has nothing left to make sure
//     of;
//   - UNRESOLVED: ChangeApplies (the statement saw an older version);
//   - anything else: ErrNotUnresolved.
//
// With p.Token set, a record holding another token is ErrLeaseLost first,
// whatever its state.
func (p *ResolveParams) Decide(rec *Record) ChangeDecision {
	target, err := p.Target()
	switch {
	case err != nil:
		return ChangeDecision{Action: ChangeRefuse, Err: err}
	case p.Token != 0 && rec.Token != p.Token:
		return ChangeDecision{Action: ChangeRefuse, Err: ErrLeaseLost}
	case rec.State == target.State && target.State == StateCompleted && bytes.Equal(rec.Result, target.Result),
		rec.State == target.State && target.State == StateFailed && rec.Error == target.Error:
		return ChangeDecision{Action: ChangeRepeat}
	case rec.State == StateUnresolved:
		return ChangeDecision{Action: ChangeApplies}
	}
	return ChangeDecision{Action: ChangeRefuse, Err: ErrNotUnresolved}
}

// ResolveParams are the inputs of RecordResolve.
type ResolveParams struct {
	RecordID
	Resolution Resolution
	Result     []byte // ResolveCompleted
	Error      string // ResolveFailed
	// Token, when not 0, is the token the caller saw the record held with:
	// a record holding another is ErrLeaseLost.
	Token int64
	// Actor and Reason are kept on the record's timeline.
	Actor  Actor
	Reason string
}

// ClaimResult is the answer of RecordClaim.
type ClaimResult struct {
	Outcome Outcome
	Record  *Record
	// RetryAfter is, for OutcomeInProgress, how long until the holder's lease
	// runs out by the store's clock.
	RetryAfter time.Duration
	// Takeover is true when this Claim acquired a record that an earlier
	// attempt had held (a lapsed lease, EXPIRED or RELEASED); false for a new
	// record and for a claimant asking again.
	Takeover bool
	// Now is the store's clock at which the answer held: when the statement
	// or transaction that read or wrote Record ran. A decorator decides a
	// Claim of the same key from it (DecideClaim) as if it ran right after.
	Now time.Time
}

// CompleteParams are the inputs of RecordComplete.
type CompleteParams struct {
	RecordID
	Token  int64
	Result []byte
}

// FailParams are the inputs of RecordFail.
type FailParams struct {
	RecordID
	Token     int64
	Error     string
	Retryable bool
}

// HeartbeatParams are the inputs of RecordHeartbeat.
type HeartbeatParams struct {
	RecordID
	Token    int64
	LeaseTTL time.Duration
}

// ListParams are the inputs of RecordList.
type ListParams struct {
	Tenant string
	// Namespace, when not empty, keeps only that namespace's records.
	Namespace string
	// State, when not empty, keeps only records in that state.
	State State
	// OlderThan, when positive, keeps only records whose UpdatedAt is at
	// least that long ago by the store's clock.
	OlderThan time.Duration
	// KeyPrefix, when not empty, keeps only records whose key starts with
	// it, compared bytewise.
	KeyPrefix string
	// After, when its Namespace or Key is set, starts the listing after that
	// (namespace, key). Its Tenant is ignored.
	After RecordID
	// Limit bounds how many records come back.
	Limit int
}

// StatsParams are the inputs of RecordStats.
type StatsParams struct {
	Tenant string
	// Namespace, when not empty, counts only that namespace.
	Namespace string
}

// StatsRow is the number of one namespace's records in one state.
type StatsRow struct {
	Namespace string
	State     State
	Count     int64
	// OldestUpdatedAt is the earliest UpdatedAt of these records.
	OldestUpdatedAt time.Time
}

// Errors a store returns. Callers test them with errors.Is.
var (
	// ErrNotFound: there is no such record.
	ErrNotFound = errors.New("record not found")
	// ErrLeaseLost: the token is not the record's current token.
	ErrLeaseLost = errors.New("lease lost: the token is not the record's current token")
	// ErrAlreadyTerminal: the token is current but the record is no longer
	// PROCESSING, EXPIRED or UNRESOLVED, and the call does not repeat, with
	// the same value, the holder's call that ended it.
	ErrAlreadyTerminal = errors.New("record is already terminal")
	// ErrResolvedByOperator: the token is current but an operator resolved
	// the record (RecordResolve), and the call does not carry the value the
	// resolution stored: what the call carries was not stored.
	ErrResolvedByOperator = errors.New("record was resolved by an operator")
	// ErrNotUnresolved: RecordResolve found the record in a state other
	// than UNRESOLVED, and not already resolved as asked (ResolveParams.Decide).
	ErrNotUnresolved = errors.New("record is not unresolved")
	// ErrFingerprintMismatch: the key was claimed before with another fingerprint.
	ErrFingerprintMismatch = errors.New("fingerprint does not match the record's")
	// ErrUnavailable: the store cannot be reached. Nothing is known to have changed.
	ErrUnavailable = errors.New("store unavailable")
	// ErrContention: the record changed under the call every time it was
	// tried. Retrying later is safe.
	ErrContention = errors.New("record changed concurrently too many times")
	// ErrInvalidText: a text field holds what no store keeps. Text is UTF-8
	// without the character U+0000 (NUL): PostgreSQL's text type holds
	// neither invalid UTF-8 nor NUL, so every store refuses both, before it
	// reads or writes anything, and the stores agree. The error is a
	// *TextError (see CheckText), which names the field.
	ErrInvalidText = errors.New("text is not valid UTF-8 without NUL characters")
)
