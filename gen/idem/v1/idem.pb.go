// idem is an idempotency-key coordination service. A worker that is about to
// perform an irreversible side effect (charge a card, send an email, call a
// webhook) for a job that an at-least-once queue may deliver more than once
// calls Claim first, performs the effect only when the outcome is ACQUIRED,
// and then calls Complete (success) or Fail (failure). Every other delivery
// of the same job gets IN_PROGRESS, or the stored result (COMPLETED) or error
// (FAILED), so the effect happens once.
//
// A record is identified by (tenant, namespace, key). The tenant comes from
// authentication and never from a request.
//
// Errors. Every error that a worker may want to branch on carries a
// google.rpc.ErrorInfo detail with domain "idem" and one of these reasons,
// the values of the enum ErrorReason (error_reason.proto) without their
// ERROR_REASON_ prefix:
//   - INVALID_ARGUMENT    / INVALID_NAMESPACE, INVALID_KEY, INVALID_FINGERPRINT,
//     INVALID_CLAIMANT, INVALID_LEASE_TTL, INVALID_RETENTION, INVALID_WAIT,
//     INVALID_RESULT, INVALID_ERROR, INVALID_TOKEN: a field is malformed or out of bounds;
//     the message names the field and the bound. Nothing was written. A
//     text field that breaks the text rule below also has the ErrorInfo
//     metadata "field" and "problem" (NUL_CHARACTER or INVALID_UTF8).
//   - FAILED_PRECONDITION / FINGERPRINT_MISMATCH: the key was used before for
//     a request with another fingerprint.
//   - FAILED_PRECONDITION / ALREADY_TERMINAL: the record is no longer
//     PROCESSING, EXPIRED or UNRESOLVED, and this call does not repeat the
//     call that ended it, the same kind with the same value.
//   - FAILED_PRECONDITION / RESOLVED_BY_OPERATOR: an operator resolved the
//     record (AdminService.ResolveRecord), and this call does not carry the
//     value the resolution stored: its result or error was not stored.
//   - FAILED_PRECONDITION / NOT_UNRESOLVED (AdminService.ResolveRecord,
//     ResolverService.Resolve): the record is not UNRESOLVED.
//     INVALID_ARGUMENT / INVALID_RESOLUTION: no resolution given;
//     INVALID_RESOLVER: a resolver's name that is empty, over 128 bytes or
//     has a control character; INVALID_REASON: a reason (of a resolution
//     or a deletion) over 1024 bytes. Nothing was written.
//   - ABORTED / LEASE_LOST: the token is not the record's current token; the
//     lease was taken over by another worker. Stop and do not retry.
//   - NOT_FOUND / NOT_FOUND: there is no such record (never claimed, purged
//     after its retention, or deleted with AdminService.DeleteRecord).
//   - UNAVAILABLE / STORE_UNAVAILABLE: the database cannot be reached. Retry
//     with backoff; nothing is known to have changed.
//   - UNAVAILABLE / CONTENTION: the record changed under the call every time
//     it was tried. Retry with backoff.
//   - UNAUTHENTICATED / UNAUTHENTICATED: no credentials, or a bearer token
//     or client certificate that names no tenant (only when idemd runs with a
//     config file). Nothing was read or written.
//   - INVALID_ARGUMENT    / INVALID_PAGE_SIZE, INVALID_PAGE_TOKEN,
//     INVALID_STATE, INVALID_OLDER_THAN (AdminService.ListRecords): the
//     page_size is outside 1–1000, the page_token is not one the server
//     returned, the state is not a known State, or older_than is outside
//     0s–87600h (10 years). Nothing was read.
//   - PERMISSION_DENIED / NAMESPACE_NOT_ALLOWED: the namespace is not in the
//     caller's tenant's allow-list; this holds for AdminService too, whose
//     listings and counts without a namespace show only the namespaces the
//     allow-list admits. PERMISSION_DENIED / NOT_ADMIN: an AdminService call
//     from a tenant without admin rights. PERMISSION_DENIED / NOT_OPERATOR:
//     an AdminService call that names another tenant, or all_tenants, from
//     a tenant that is not an operator; metadata "field" names the field.
//   - INVALID_ARGUMENT    / INVALID_TENANT (AdminService): the tenant named
//     is not in idemd's config, or tenant and all_tenants are both set.
//   - RESOURCE_EXHAUSTED / RATE_LIMITED: the tenant is over its rate limit;
//     a google.rpc.RetryInfo says how long to wait. Nothing was written.
//     In a batch call it is counted per item: the items over the limit get
//     it, each in its own result.
//   - INVALID_ARGUMENT    / INVALID_BATCH_SIZE (the batch calls): the
//     request holds no items or more than the server allows.
//   - The step calls' own (StartStep, CompleteStep): INVALID_ARGUMENT /
//     INVALID_STEP_NAME; FAILED_PRECONDITION / STEP_ALREADY_FINISHED, the
//     step is FINISHED with another result, or a StartStep of a FINISHED
//     step; RESOURCE_EXHAUSTED / TOO_MANY_STEPS or STEPS_TOO_LARGE, the
//     job's steps would be more than the server allows. Nothing was
//     written.
//   - The HTTP/JSON API's own (docs/http-api.md): INVALID_ARGUMENT /
//     UNKNOWN_FIELD, a body field or query parameter the request does not
//     have; INVALID_ARGUMENT / MALFORMED_REQUEST, a body that is not one
//     JSON object of the request's type, or (HTTP 415) a Content-Type or
//     Content-Encoding it does not read; RESOURCE_EXHAUSTED /
//     REQUEST_TOO_LARGE (HTTP 413), a body over the largest valid request.
//     A JSON value that is not of its field's type gets that field's reason
//     (INVALID_LEASE_TTL, …) where it has one. Nothing was written.
//
// Text. Every string field (namespace, key, claimant, error) is UTF-8
// without the character U+0000 (NUL), whichever store the server runs on:
// a NUL anywhere in one is INVALID_ARGUMENT with that field's reason
// (INVALID_CLAIMANT, …) and the problem NUL_CHARACTER, also on a Claim that
// would only replay; nothing is read or written. A string that is not valid
// UTF-8 is refused by gRPC's protobuf decoding (INTERNAL, "error
// unmarshalling request") before idem sees it; a transport that hands it on,
// as the HTTP/JSON API does for a JSON string or a REST path segment, gets
// INVALID_ARGUMENT with the problem INVALID_UTF8. Other control
// characters (tab, newline, …) are kept as sent, except in keys, which allow
// none. The Go SDK's Do makes the error text it sends storable: NULs and
// bytes that are not UTF-8 become U+FFFD and it is cut to 4 KiB.

// Code generated by protoc-gen-go. DO NOT EDIT.
// versions:
// 	protoc-gen-go v1.36.12
// 	protoc        (unknown)
// source: idem/v1/idem.proto

package idemv1

import (
	_ "google.golang.org/genproto/googleapis/api/annotations"
	status "google.golang.org/genproto/googleapis/rpc/status"
	protoreflect "google.golang.org/protobuf/reflect/protoreflect"
	protoimpl "google.golang.org/protobuf/runtime/protoimpl"
	durationpb "google.golang.org/protobuf/types/known/durationpb"
	timestamppb "google.golang.org/protobuf/types/known/timestamppb"
	reflect "reflect"
	sync "sync"
	unsafe "unsafe"
)

const (
	// Verify that this generated code is sufficiently up-to-date.
	_ = protoimpl.EnforceVersion(20 - protoimpl.MinVersion)
	// Verify that runtime/protoimpl is sufficiently up-to-date.
	_ = protoimpl.EnforceVersion(protoimpl.MaxVersion - 20)
)

// State is where a record is in its life.
type State int32

const (
	// Never sent by the server.
	State_STATE_UNSPECIFIED State = 0
	// A worker holds the record under a lease. A Claim gets IN_PROGRESS while
	// the lease lives, and ACQUIRED (a takeover) once it has run out.
	State_STATE_PROCESSING State = 1
	// Terminal success: the result is stored and every Claim replays it.
	State_STATE_COMPLETED State = 2
	// Terminal failure (Fail with retryable=false): the error is stored and
	// every Claim replays it.
	State_STATE_FAILED State = 3
	// The holder gave the record back (Fail with retryable=true): the next
	// Claim acquires it.
	State_STATE_RELEASED State = 4
	// The lease ran out with no Complete or Fail (set by the sweeper): the next
	// Claim acquires it.
	State_STATE_EXPIRED State = 5
	// Held for resolution: the record's policy says on_lease_expiry: hold
	// (Record.hold), and its lease ran out with no Complete or Fail (set by the
	// sweeper, or by the Claim that found it first). Nobody took it over, so
	// the worker that held it still has the current token: its late Complete
	// or Fail is accepted and resolves it (a Heartbeat makes it PROCESSING
	// again). Otherwise an operator resolves it with
	// AdminService.ResolveRecord. Every Claim meanwhile gets
	// OUTCOME_UNRESOLVED. It is never purged: it waits for a resolution.
	State_STATE_UNRESOLVED State = 6
)

// Enum value maps for State.
var (
	State_name = map[int32]string{
		0: "STATE_UNSPECIFIED",
		1: "STATE_PROCESSING",
		2: "STATE_COMPLETED",
		3: "STATE_FAILED",
		4: "STATE_RELEASED",
		5: "STATE_EXPIRED",
		6: "STATE_UNRESOLVED",
	}
	State_value = map[string]int32{
		"STATE_UNSPECIFIED": 0,
		"STATE_PROCESSING":  1,
		"STATE_COMPLETED":   2,
		"STATE_FAILED":      3,
		"STATE_RELEASED":    4,
		"STATE_EXPIRED":     5,
		"STATE_UNRESOLVED":  6,
	}
)

func (x State) Enum() *State {
	p := new(State)
	*p = x
	return p
}

func (x State) String() string {
	return protoimpl.X.EnumStringOf(x.Descriptor(), protoreflect.EnumNumber(x))
}

func (State) Descriptor() protoreflect.EnumDescriptor {
	return file_idem_v1_idem_proto_enumTypes[0].Descriptor()
}

func (State) Type() protoreflect.EnumType {
	return &file_idem_v1_idem_proto_enumTypes[0]
}

func (x State) Number() protoreflect.EnumNumber {
	return protoreflect.EnumNumber(x)
}

// Deprecated: Use State.Descriptor instead.
func (State) EnumDescriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{0}
}

// Outcome is the answer to a Claim.
type Outcome int32

const (
	// Never sent by the server.
	Outcome_OUTCOME_UNSPECIFIED Outcome = 0
	// The caller holds the record with record.token until
	// record.lease_expires_at. Perform the side effect, then call Complete or
	// Fail with that token. record.attempt > 1 means an earlier attempt may
	// have done part of the work.
	Outcome_OUTCOME_ACQUIRED Outcome = 1
	// Another worker holds a live lease. Do not perform the side effect; retry
	// after retry_after, or let the queue redeliver the job. A Claim sent with
	// a wait gets it only when the wait ran out (or the server holds as many
	// waiting Claims as it allows).
	Outcome_OUTCOME_IN_PROGRESS Outcome = 2
	// The job completed earlier: record.result holds the stored result. Do not
	// perform the side effect again.
	Outcome_OUTCOME_COMPLETED Outcome = 3
	// The job failed permanently earlier: record.error holds the stored error.
	// Do not perform the side effect.
	Outcome_OUTCOME_FAILED Outcome = 4
	// The record is UNRESOLVED (see STATE_UNRESOLVED): an earlier attempt may
	// or may not have performed the side effect, and its policy says a person
	// or the late holder decides. Do not perform the side effect; park the
	// message (a dead-letter queue) until the record is resolved. A Claim
	// never takes an UNRESOLVED record over.
	Outcome_OUTCOME_UNRESOLVED Outcome = 5
)

// Enum value maps for Outcome.
var (
	Outcome_name = map[int32]string{
		0: "OUTCOME_UNSPECIFIED",
		1: "OUTCOME_ACQUIRED",
		2: "OUTCOME_IN_PROGRESS",
		3: "OUTCOME_COMPLETED",
		4: "OUTCOME_FAILED",
		5: "OUTCOME_UNRESOLVED",
	}
	Outcome_value = map[string]int32{
		"OUTCOME_UNSPECIFIED": 0,
		"OUTCOME_ACQUIRED":    1,
		"OUTCOME_IN_PROGRESS": 2,
		"OUTCOME_COMPLETED":   3,
		"OUTCOME_FAILED":      4,
		"OUTCOME_UNRESOLVED":  5,
	}
)

func (x Outcome) Enum() *Outcome {
	p := new(Outcome)
	*p = x
	return p
}

func (x Outcome) String() string {
	return protoimpl.X.EnumStringOf(x.Descriptor(), protoreflect.EnumNumber(x))
}

func (Outcome) Descriptor() protoreflect.EnumDescriptor {
	return file_idem_v1_idem_proto_enumTypes[1].Descriptor()
}

func (Outcome) Type() protoreflect.EnumType {
	return &file_idem_v1_idem_proto_enumTypes[1]
}

func (x Outcome) Number() protoreflect.EnumNumber {
	return protoreflect.EnumNumber(x)
}

// Deprecated: Use Outcome.Descriptor instead.
func (Outcome) EnumDescriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{1}
}

// StepState is where a step is.
type StepState int32

const (
	// Never sent by the server.
	StepState_STEP_STATE_UNSPECIFIED StepState = 0
	// StartStep said the step's effect was about to happen: it may or may
	// not have.
	StepState_STEP_STATE_STARTED StepState = 1
	// CompleteStep recorded the step's result: its effect happened. A
	// FINISHED step never changes.
	StepState_STEP_STATE_FINISHED StepState = 2
)

// Enum value maps for StepState.
var (
	StepState_name = map[int32]string{
		0: "STEP_STATE_UNSPECIFIED",
		1: "STEP_STATE_STARTED",
		2: "STEP_STATE_FINISHED",
	}
	StepState_value = map[string]int32{
		"STEP_STATE_UNSPECIFIED": 0,
		"STEP_STATE_STARTED":     1,
		"STEP_STATE_FINISHED":    2,
	}
)

func (x StepState) Enum() *StepState {
	p := new(StepState)
	*p = x
	return p
}

func (x StepState) String() string {
	return protoimpl.X.EnumStringOf(x.Descriptor(), protoreflect.EnumNumber(x))
}

func (StepState) Descriptor() protoreflect.EnumDescriptor {
	return file_idem_v1_idem_proto_enumTypes[2].Descriptor()
}

func (StepState) Type() protoreflect.EnumType {
	return &file_idem_v1_idem_proto_enumTypes[2]
}

func (x StepState) Number() protoreflect.EnumNumber {
	return protoreflect.EnumNumber(x)
}

// Deprecated: Use StepState.Descriptor instead.
func (StepState) EnumDescriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{2}
}

// TimelineEntryKind is what a TimelineEntry records.
type TimelineEntryKind int32

const (
	// Never sent by the server.
	TimelineEntryKind_TIMELINE_ENTRY_KIND_UNSPECIFIED TimelineEntryKind = 0
	// A Claim acquired the record from an earlier attempt: its lease had run
	// out (the holder stalled or died), it was EXPIRED, or RELEASED.
	TimelineEntryKind_TIMELINE_ENTRY_KIND_TAKEN_OVER TimelineEntryKind = 1
	// The holder's Fail with retryable=false: the record is FAILED.
	TimelineEntryKind_TIMELINE_ENTRY_KIND_FAILED TimelineEntryKind = 2
	// The holder's Fail with retryable=true: the record is RELEASED.
	TimelineEntryKind_TIMELINE_ENTRY_KIND_RELEASED TimelineEntryKind = 3
	// The lease ran out under a hold policy: the record is UNRESOLVED (by
	// the sweeper, or by the Claim that found it so).
	TimelineEntryKind_TIMELINE_ENTRY_KIND_HELD TimelineEntryKind = 4
	// A person (AdminService.ResolveRecord) or a resolver
	// (ResolverService.Resolve) resolved the UNRESOLVED record.
	TimelineEntryKind_TIMELINE_ENTRY_KIND_RESOLVED TimelineEntryKind = 5
	// AdminService.DeleteRecord deleted the record.
	TimelineEntryKind_TIMELINE_ENTRY_KIND_DELETED TimelineEntryKind = 6
	// A Claim with another fingerprint was refused (FINGERPRINT_MISMATCH).
	// One entry per lease and refused fingerprint, however often the Claim
	// comes back.
	TimelineEntryKind_TIMELINE_ENTRY_KIND_FINGERPRINT_MISMATCH TimelineEntryKind = 7
)

// Enum value maps for TimelineEntryKind.
var (
	TimelineEntryKind_name = map[int32]string{
		0: "TIMELINE_ENTRY_KIND_UNSPECIFIED",
		1: "TIMELINE_ENTRY_KIND_TAKEN_OVER",
		2: "TIMELINE_ENTRY_KIND_FAILED",
		3: "TIMELINE_ENTRY_KIND_RELEASED",
		4: "TIMELINE_ENTRY_KIND_HELD",
		5: "TIMELINE_ENTRY_KIND_RESOLVED",
		6: "TIMELINE_ENTRY_KIND_DELETED",
		7: "TIMELINE_ENTRY_KIND_FINGERPRINT_MISMATCH",
	}
	TimelineEntryKind_value = map[string]int32{
		"TIMELINE_ENTRY_KIND_UNSPECIFIED":          0,
		"TIMELINE_ENTRY_KIND_TAKEN_OVER":           1,
		"TIMELINE_ENTRY_KIND_FAILED":               2,
		"TIMELINE_ENTRY_KIND_RELEASED":             3,
		"TIMELINE_ENTRY_KIND_HELD":                 4,
		"TIMELINE_ENTRY_KIND_RESOLVED":             5,
		"TIMELINE_ENTRY_KIND_DELETED":              6,
		"TIMELINE_ENTRY_KIND_FINGERPRINT_MISMATCH": 7,
	}
)

func (x TimelineEntryKind) Enum() *TimelineEntryKind {
	p := new(TimelineEntryKind)
	*p = x
	return p
}

func (x TimelineEntryKind) String() string {
	return protoimpl.X.EnumStringOf(x.Descriptor(), protoreflect.EnumNumber(x))
}

func (TimelineEntryKind) Descriptor() protoreflect.EnumDescriptor {
	return file_idem_v1_idem_proto_enumTypes[3].Descriptor()
}

func (TimelineEntryKind) Type() protoreflect.EnumType {
	return &file_idem_v1_idem_proto_enumTypes[3]
}

func (x TimelineEntryKind) Number() protoreflect.EnumNumber {
	return protoreflect.EnumNumber(x)
}

// Deprecated: Use TimelineEntryKind.Descriptor instead.
func (TimelineEntryKind) EnumDescriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{3}
}

// Record is the server's state for one (namespace, key).
type Record struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The job type or scope the key belongs to.
	Namespace string `protobuf:"bytes,1,opt,name=namespace,proto3" json:"namespace,omitempty"`
	// The idempotency key.
	Key string `protobuf:"bytes,2,opt,name=key,proto3" json:"key,omitempty"`
	// Where the record is in its life.
	State State `protobuf:"varint,3,opt,name=state,proto3,enum=idem.v1.State" json:"state,omitempty"`
	// The fencing token of the latest ACQUIRED outcome. Every acquisition hands
	// out a token strictly greater than all earlier ones for this record, also
	// across a purge. Pass it to downstream systems that can reject stale
	// writers.
	Token int64 `protobuf:"varint,4,opt,name=token,proto3" json:"token,omitempty"`
	// How many times the record was acquired since it was created.
	Attempt int32 `protobuf:"varint,5,opt,name=attempt,proto3" json:"attempt,omitempty"`
	// The claimant id sent with the latest ACQUIRED Claim; empty if none.
	Claimant string `protobuf:"bytes,6,opt,name=claimant,proto3" json:"claimant,omitempty"`
	// The fingerprint stored when the record was created; empty if none.
	Fingerprint []byte `protobuf:"bytes,7,opt,name=fingerprint,proto3" json:"fingerprint,omitempty"`
	// When the current lease runs out. Set while PROCESSING, and kept on an
	// EXPIRED record to show when it ran out.
	LeaseExpiresAt *timestamppb.Timestamp `protobuf:"bytes,8,opt,name=lease_expires_at,json=leaseExpiresAt,proto3" json:"lease_expires_at,omitempty"`
	// The result stored by Complete (COMPLETED only).
	Result []byte `protobuf:"bytes,9,opt,name=result,proto3" json:"result,omitempty"`
	// The error stored by Fail (FAILED and RELEASED only).
	Error string `protobuf:"bytes,10,opt,name=error,proto3" json:"error,omitempty"`
	// When the record was created.
	CreatedAt *timestamppb.Timestamp `protobuf:"bytes,11,opt,name=created_at,json=createdAt,proto3" json:"created_at,omitempty"`
	// When the record last changed.
	UpdatedAt *timestamppb.Timestamp `protobuf:"bytes,12,opt,name=updated_at,json=updatedAt,proto3" json:"updated_at,omitempty"`
	// When the record became COMPLETED or FAILED.
	CompletedAt *timestamppb.Timestamp `protobuf:"bytes,13,opt,name=completed_at,json=completedAt,proto3" json:"completed_at,omitempty"`
	// When the record may be purged: the moment it left PROCESSING plus its
	// retention. Unset while PROCESSING.
	ExpiresAt *timestamppb.Timestamp `protobuf:"bytes,14,opt,name=expires_at,json=expiresAt,proto3" json:"expires_at,omitempty"`
	// The policy of idemd's config file that applied when the record was last
	// acquired: the policy's namespace globs joined by commas ("payments.*").
	// Empty when no policy matched the namespace and the server's defaults
	// applied. A policy sets the lease and retention a Claim gets when it
	// sends none, and the longest lease a Claim or Heartbeat may ask for.
	Policy string `protobuf:"bytes,15,opt,name=policy,proto3" json:"policy,omitempty"`
	// The tenant that owns the record. Set in AdminService answers, where an
	// operator may see several tenants' records; empty elsewhere, where it is
	// always the caller's.
	Tenant string `protobuf:"bytes,16,opt,name=tenant,proto3" json:"tenant,omitempty"`
	// True when that policy says on_lease_expiry: hold: a lease that runs out
	// with no Complete or Fail makes the record UNRESOLVED instead of open to
	// a takeover.
	Hold bool `protobuf:"varint,17,opt,name=hold,proto3" json:"hold,omitempty"`
	// The job's steps (StartStep, CompleteStep), in the order they were
	// first recorded; empty when it has none. Set in the answers of Claim
	// (whatever the outcome), Lookup, BatchClaim, BatchLookup and
	// AdminService; the answers of Complete, Fail and Heartbeat leave it
	// empty.
	Steps []*Step `protobuf:"bytes,30,rep,name=steps,proto3" json:"steps,omitempty"`
	// True when the policy of the latest step call said on_unfinished_step:
	// hold: a Claim that would take the record over while a step is STARTED
	// makes it UNRESOLVED instead. Set where steps is.
	HoldUnfinished bool `protobuf:"varint,31,opt,name=hold_unfinished,json=holdUnfinished,proto3" json:"hold_unfinished,omitempty"`
	unknownFields  protoimpl.UnknownFields
	sizeCache      protoimpl.SizeCache
}

func (x *Record) Reset() {
	*x = Record{}
	mi := &file_idem_v1_idem_proto_msgTypes[0]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *Record) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*Record) ProtoMessage() {}

func (x *Record) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[0]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use Record.ProtoReflect.Descriptor instead.
func (*Record) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{0}
}

func (x *Record) GetNamespace() string {
	if x != nil {
		return x.Namespace
	}
	return ""
}

func (x *Record) GetKey() string {
	if x != nil {
		return x.Key
	}
	return ""
}

func (x *Record) GetState() State {
	if x != nil {
		return x.State
	}
	return State_STATE_UNSPECIFIED
}

func (x *Record) GetToken() int64 {
	if x != nil {
		return x.Token
	}
	return 0
}

func (x *Record) GetAttempt() int32 {
	if x != nil {
		return x.Attempt
	}
	return 0
}

func (x *Record) GetClaimant() string {
	if x != nil {
		return x.Claimant
	}
	return ""
}

func (x *Record) GetFingerprint() []byte {
	if x != nil {
		return x.Fingerprint
	}
	return nil
}

func (x *Record) GetLeaseExpiresAt() *timestamppb.Timestamp {
	if x != nil {
		return x.LeaseExpiresAt
	}
	return nil
}

func (x *Record) GetResult() []byte {
	if x != nil {
		return x.Result
	}
	return nil
}

func (x *Record) GetError() string {
	if x != nil {
		return x.Error
	}
	return ""
}

func (x *Record) GetCreatedAt() *timestamppb.Timestamp {
	if x != nil {
		return x.CreatedAt
	}
	return nil
}

func (x *Record) GetUpdatedAt() *timestamppb.Timestamp {
	if x != nil {
		return x.UpdatedAt
	}
	return nil
}

func (x *Record) GetCompletedAt() *timestamppb.Timestamp {
	if x != nil {
		return x.CompletedAt
	}
	return nil
}

func (x *Record) GetExpiresAt() *timestamppb.Timestamp {
	if x != nil {
		return x.ExpiresAt
	}
	return nil
}

func (x *Record) GetPolicy() string {
	if x != nil {
		return x.Policy
	}
	return ""
}

func (x *Record) GetTenant() string {
	if x != nil {
		return x.Tenant
	}
	return ""
}

func (x *Record) GetHold() bool {
	if x != nil {
		return x.Hold
	}
	return false
}

func (x *Record) GetSteps() []*Step {
	if x != nil {
		return x.Steps
	}
	return nil
}

func (x *Record) GetHoldUnfinished() bool {
	if x != nil {
		return x.HoldUnfinished
	}
	return false
}

// Step is one named step of a job.
type Step struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The step's name, unique in its job.
	Name string `protobuf:"bytes,1,opt,name=name,proto3" json:"name,omitempty"`
	// STARTED or FINISHED.
	State StepState `protobuf:"varint,2,opt,name=state,proto3,enum=idem.v1.StepState" json:"state,omitempty"`
	// The result CompleteStep recorded (FINISHED only; may be empty).
	Result []byte `protobuf:"bytes,3,opt,name=result,proto3" json:"result,omitempty"`
	// The token of the holder that last wrote the step: the one that
	// finished it, or, while it is STARTED, that started it.
	Token int64 `protobuf:"varint,4,opt,name=token,proto3" json:"token,omitempty"`
	// When the step was started; for a step finished without StartStep, when
	// it finished.
	StartedAt *timestamppb.Timestamp `protobuf:"bytes,5,opt,name=started_at,json=startedAt,proto3" json:"started_at,omitempty"`
	// When the step finished; unset while it is STARTED.
	FinishedAt    *timestamppb.Timestamp `protobuf:"bytes,6,opt,name=finished_at,json=finishedAt,proto3" json:"finished_at,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *Step) Reset() {
	*x = Step{}
	mi := &file_idem_v1_idem_proto_msgTypes[1]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *Step) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*Step) ProtoMessage() {}

func (x *Step) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[1]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use Step.ProtoReflect.Descriptor instead.
func (*Step) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{1}
}

func (x *Step) GetName() string {
	if x != nil {
		return x.Name
	}
	return ""
}

func (x *Step) GetState() StepState {
	if x != nil {
		return x.State
	}
	return StepState_STEP_STATE_UNSPECIFIED
}

func (x *Step) GetResult() []byte {
	if x != nil {
		return x.Result
	}
	return nil
}

func (x *Step) GetToken() int64 {
	if x != nil {
		return x.Token
	}
	return 0
}

func (x *Step) GetStartedAt() *timestamppb.Timestamp {
	if x != nil {
		return x.StartedAt
	}
	return nil
}

func (x *Step) GetFinishedAt() *timestamppb.Timestamp {
	if x != nil {
		return x.FinishedAt
	}
	return nil
}

// ClaimRequest asks for the right to perform one job.
type ClaimRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The job type or scope, e.g. "process_payment". It must match
	// ^[a-z0-9][a-z0-9_.-]{0,63}$.
	Namespace string `protobuf:"bytes,1,opt,name=namespace,proto3" json:"namespace,omitempty"`
	// The idempotency key, chosen once when the job was created: 1 to 256 bytes
	// of UTF-8 without control characters.
	Key string `protobuf:"bytes,2,opt,name=key,proto3" json:"key,omitempty"`
	// Optional hash of the request (at most 64 bytes, e.g. SHA-256 of the
	// canonical job payload). It is stored when the record is created; a later
	// Claim with a different non-empty fingerprint is rejected with
	// FAILED_PRECONDITION / FINGERPRINT_MISMATCH.
	Fingerprint []byte `protobuf:"bytes,3,opt,name=fingerprint,proto3" json:"fingerprint,omitempty"`
	// How long the lease lasts without a Heartbeat. Default 5 minutes; bounds
	// 1 second to 24 hours. A policy of idemd's config file that matches the
	// namespace may set another default (its lease_ttl) and a lower bound
	// (its max_lease_ttl): asking for more is INVALID_ARGUMENT /
	// INVALID_LEASE_TTL, naming the policy. Record.policy names it.
	LeaseTtl *durationpb.Duration `protobuf:"bytes,4,opt,name=lease_ttl,json=leaseTtl,proto3" json:"lease_ttl,omitempty"`
	// Optional id of the caller's attempt (at most 128 bytes of UTF-8 without
	// NUL, e.g. a UUID).
	// Repeating a Claim with the same claimant while its lease lives returns
	// ACQUIRED again with the same token, so a Claim whose response was lost
	// can be retried safely.
	Claimant string `protobuf:"bytes,5,opt,name=claimant,proto3" json:"claimant,omitempty"`
	// How long the record is kept after it leaves PROCESSING, before it may be
	// purged. Default 24 hours, or the retention of the policy that matches
	// the namespace; bounds 1 minute to 90 days.
	Retention *durationpb.Duration `protobuf:"bytes,6,opt,name=retention,proto3" json:"retention,omitempty"`
	// How long to wait, when the answer would be IN_PROGRESS, for the holder
	// to finish. Unset or 0 answers at once (IN_PROGRESS with retry_after).
	// Otherwise the call waits until the record is COMPLETED or FAILED (the
	// answer is that outcome with the stored result or error), or can be
	// acquired (RELEASED, or its lease ran out: the waiting Claim acquires it
	// and gets ACQUIRED; of several waiting Claims one does, and the others
	// keep waiting), or the wait runs out (IN_PROGRESS, as without a wait).
	// A Complete or Fail on any replica wakes the waiting Claim at once
	// (within about 250 ms where idemd sits behind a transaction pooler with
	// no direct connection to listen on); the client does not poll. The wait
	// never outlasts the call's own deadline: it ends early enough for the
	// answer to arrive in time. At most 60 seconds (INVALID_ARGUMENT /
	// INVALID_WAIT outside 0 to 60 s). When the
	// server already holds as many waiting Claims as it allows (in all, or for
	// the tenant), the Claim answers IN_PROGRESS at once, as without a wait.
	Wait          *durationpb.Duration `protobuf:"bytes,7,opt,name=wait,proto3" json:"wait,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *ClaimRequest) Reset() {
	*x = ClaimRequest{}
	mi := &file_idem_v1_idem_proto_msgTypes[2]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *ClaimRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ClaimRequest) ProtoMessage() {}

func (x *ClaimRequest) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[2]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ClaimRequest.ProtoReflect.Descriptor instead.
func (*ClaimRequest) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{2}
}

func (x *ClaimRequest) GetNamespace() string {
	if x != nil {
		return x.Namespace
	}
	return ""
}

func (x *ClaimRequest) GetKey() string {
	if x != nil {
		return x.Key
	}
	return ""
}

func (x *ClaimRequest) GetFingerprint() []byte {
	if x != nil {
		return x.Fingerprint
	}
	return nil
}

func (x *ClaimRequest) GetLeaseTtl() *durationpb.Duration {
	if x != nil {
		return x.LeaseTtl
	}
	return nil
}

func (x *ClaimRequest) GetClaimant() string {
	if x != nil {
		return x.Claimant
	}
	return ""
}

func (x *ClaimRequest) GetRetention() *durationpb.Duration {
	if x != nil {
		return x.Retention
	}
	return nil
}

func (x *ClaimRequest) GetWait() *durationpb.Duration {
	if x != nil {
		return x.Wait
	}
	return nil
}

// ClaimResponse tells the caller what to do.
type ClaimResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// What to do: see Outcome.
	Outcome Outcome `protobuf:"varint,1,opt,name=outcome,proto3,enum=idem.v1.Outcome" json:"outcome,omitempty"`
	// The record after the Claim.
	Record *Record `protobuf:"bytes,2,opt,name=record,proto3" json:"record,omitempty"`
	// For IN_PROGRESS: how long until the holder's lease runs out. A Claim
	// after that may acquire the record.
	RetryAfter    *durationpb.Duration `protobuf:"bytes,3,opt,name=retry_after,json=retryAfter,proto3" json:"retry_after,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *ClaimResponse) Reset() {
	*x = ClaimResponse{}
	mi := &file_idem_v1_idem_proto_msgTypes[3]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *ClaimResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*ClaimResponse) ProtoMessage() {}

func (x *ClaimResponse) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[3]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use ClaimResponse.ProtoReflect.Descriptor instead.
func (*ClaimResponse) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{3}
}

func (x *ClaimResponse) GetOutcome() Outcome {
	if x != nil {
		return x.Outcome
	}
	return Outcome_OUTCOME_UNSPECIFIED
}

func (x *ClaimResponse) GetRecord() *Record {
	if x != nil {
		return x.Record
	}
	return nil
}

func (x *ClaimResponse) GetRetryAfter() *durationpb.Duration {
	if x != nil {
		return x.RetryAfter
	}
	return nil
}

// CompleteRequest records a job's success.
type CompleteRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The namespace of the Claim.
	Namespace string `protobuf:"bytes,1,opt,name=namespace,proto3" json:"namespace,omitempty"`
	// The key of the Claim.
	Key string `protobuf:"bytes,2,opt,name=key,proto3" json:"key,omitempty"`
	// The token of the ACQUIRED outcome.
	Token int64 `protobuf:"varint,3,opt,name=token,proto3" json:"token,omitempty"`
	// The result to store and replay to later Claims: opaque bytes, at most
	// 64 KiB unless the server is configured otherwise (INVALID_ARGUMENT /
	// INVALID_RESULT). A request far over the limit is refused by gRPC itself
	// with RESOURCE_EXHAUSTED before idem reads it.
	Result        []byte `protobuf:"bytes,4,opt,name=result,proto3" json:"result,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *CompleteRequest) Reset() {
	*x = CompleteRequest{}
	mi := &file_idem_v1_idem_proto_msgTypes[4]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *CompleteRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*CompleteRequest) ProtoMessage() {}

func (x *CompleteRequest) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[4]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use CompleteRequest.ProtoReflect.Descriptor instead.
func (*CompleteRequest) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{4}
}

func (x *CompleteRequest) GetNamespace() string {
	if x != nil {
		return x.Namespace
	}
	return ""
}

func (x *CompleteRequest) GetKey() string {
	if x != nil {
		return x.Key
	}
	return ""
}

func (x *CompleteRequest) GetToken() int64 {
	if x != nil {
		return x.Token
	}
	return 0
}

func (x *CompleteRequest) GetResult() []byte {
	if x != nil {
		return x.Result
	}
	return nil
}

// CompleteResponse carries the COMPLETED record.
type CompleteResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The record, now COMPLETED.
	Record        *Record `protobuf:"bytes,1,opt,name=record,proto3" json:"record,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *CompleteResponse) Reset() {
	*x = CompleteResponse{}
	mi := &file_idem_v1_idem_proto_msgTypes[5]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *CompleteResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*CompleteResponse) ProtoMessage() {}

func (x *CompleteResponse) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[5]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use CompleteResponse.ProtoReflect.Descriptor instead.
func (*CompleteResponse) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{5}
}

func (x *CompleteResponse) GetRecord() *Record {
	if x != nil {
		return x.Record
	}
	return nil
}

// FailRequest records a job's failure.
type FailRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The namespace of the Claim.
	Namespace string `protobuf:"bytes,1,opt,name=namespace,proto3" json:"namespace,omitempty"`
	// The key of the Claim.
	Key string `protobuf:"bytes,2,opt,name=key,proto3" json:"key,omitempty"`
	// The token of the ACQUIRED outcome.
	Token int64 `protobuf:"varint,3,opt,name=token,proto3" json:"token,omitempty"`
	// What went wrong: at most 4 KiB of UTF-8 without NUL (INVALID_ARGUMENT /
	// INVALID_ERROR otherwise). Replayed to later Claims when the failure is
	// permanent.
	Error string `protobuf:"bytes,4,opt,name=error,proto3" json:"error,omitempty"`
	// true: give the record back (RELEASED) so that the next Claim acquires it.
	// false: the failure is permanent (FAILED) and is replayed to every later
	// Claim.
	Retryable     bool `protobuf:"varint,5,opt,name=retryable,proto3" json:"retryable,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *FailRequest) Reset() {
	*x = FailRequest{}
	mi := &file_idem_v1_idem_proto_msgTypes[6]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *FailRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*FailRequest) ProtoMessage() {}

func (x *FailRequest) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[6]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use FailRequest.ProtoReflect.Descriptor instead.
func (*FailRequest) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{6}
}

func (x *FailRequest) GetNamespace() string {
	if x != nil {
		return x.Namespace
	}
	return ""
}

func (x *FailRequest) GetKey() string {
	if x != nil {
		return x.Key
	}
	return ""
}

func (x *FailRequest) GetToken() int64 {
	if x != nil {
		return x.Token
	}
	return 0
}

func (x *FailRequest) GetError() string {
	if x != nil {
		return x.Error
	}
	return ""
}

func (x *FailRequest) GetRetryable() bool {
	if x != nil {
		return x.Retryable
	}
	return false
}

// FailResponse carries the FAILED or RELEASED record.
type FailResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The record, now FAILED or RELEASED.
	Record        *Record `protobuf:"bytes,1,opt,name=record,proto3" json:"record,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *FailResponse) Reset() {
	*x = FailResponse{}
	mi := &file_idem_v1_idem_proto_msgTypes[7]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *FailResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*FailResponse) ProtoMessage() {}

func (x *FailResponse) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[7]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use FailResponse.ProtoReflect.Descriptor instead.
func (*FailResponse) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{7}
}

func (x *FailResponse) GetRecord() *Record {
	if x != nil {
		return x.Record
	}
	return nil
}

// HeartbeatRequest extends a lease.
type HeartbeatRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The namespace of the Claim.
	Namespace string `protobuf:"bytes,1,opt,name=namespace,proto3" json:"namespace,omitempty"`
	// The key of the Claim.
	Key string `protobuf:"bytes,2,opt,name=key,proto3" json:"key,omitempty"`
	// The token of the ACQUIRED outcome.
	Token int64 `protobuf:"varint,3,opt,name=token,proto3" json:"token,omitempty"`
	// The new lease, counted from now. Default 5 minutes; bounds 1 second to
	// 24 hours. The namespace's policy, when one matches, sets the default
	// and lowers the bound as it does for Claim.
	LeaseTtl      *durationpb.Duration `protobuf:"bytes,4,opt,name=lease_ttl,json=leaseTtl,proto3" json:"lease_ttl,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *HeartbeatRequest) Reset() {
	*x = HeartbeatRequest{}
	mi := &file_idem_v1_idem_proto_msgTypes[8]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *HeartbeatRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*HeartbeatRequest) ProtoMessage() {}

func (x *HeartbeatRequest) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[8]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use HeartbeatRequest.ProtoReflect.Descriptor instead.
func (*HeartbeatRequest) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{8}
}

func (x *HeartbeatRequest) GetNamespace() string {
	if x != nil {
		return x.Namespace
	}
	return ""
}

func (x *HeartbeatRequest) GetKey() string {
	if x != nil {
		return x.Key
	}
	return ""
}

func (x *HeartbeatRequest) GetToken() int64 {
	if x != nil {
		return x.Token
	}
	return 0
}

func (x *HeartbeatRequest) GetLeaseTtl() *durationpb.Duration {
	if x != nil {
		return x.LeaseTtl
	}
	return nil
}

// HeartbeatResponse carries the record with its new lease.
type HeartbeatResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The record, PROCESSING with the new lease_expires_at.
	Record        *Record `protobuf:"bytes,1,opt,name=record,proto3" json:"record,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *HeartbeatResponse) Reset() {
	*x = HeartbeatResponse{}
	mi := &file_idem_v1_idem_proto_msgTypes[9]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *HeartbeatResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*HeartbeatResponse) ProtoMessage() {}

func (x *HeartbeatResponse) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[9]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use HeartbeatResponse.ProtoReflect.Descriptor instead.
func (*HeartbeatResponse) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{9}
}

func (x *HeartbeatResponse) GetRecord() *Record {
	if x != nil {
		return x.Record
	}
	return nil
}

// LookupRequest reads one record.
type LookupRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The namespace of the record.
	Namespace string `protobuf:"bytes,1,opt,name=namespace,proto3" json:"namespace,omitempty"`
	// The key of the record.
	Key string `protobuf:"bytes,2,opt,name=key,proto3" json:"key,omitempty"`
	// Also read the record's timeline (LookupResponse.history). A record
	// that does not exist is NOT_FOUND all the same.
	IncludeHistory bool `protobuf:"varint,3,opt,name=include_history,json=includeHistory,proto3" json:"include_history,omitempty"`
	unknownFields  protoimpl.UnknownFields
	sizeCache      protoimpl.SizeCache
}

func (x *LookupRequest) Reset() {
	*x = LookupRequest{}
	mi := &file_idem_v1_idem_proto_msgTypes[10]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *LookupRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*LookupRequest) ProtoMessage() {}

func (x *LookupRequest) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[10]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use LookupRequest.ProtoReflect.Descriptor instead.
func (*LookupRequest) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{10}
}

func (x *LookupRequest) GetNamespace() string {
	if x != nil {
		return x.Namespace
	}
	return ""
}

func (x *LookupRequest) GetKey() string {
	if x != nil {
		return x.Key
	}
	return ""
}

func (x *LookupRequest) GetIncludeHistory() bool {
	if x != nil {
		return x.IncludeHistory
	}
	return false
}

// LookupResponse carries the record.
type LookupResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The record.
	Record *Record `protobuf:"bytes,1,opt,name=record,proto3" json:"record,omitempty"`
	// With include_history: the exceptions in the life of the record's key,
	// oldest first (see TimelineEntry); empty for a record whose life had
	// none. At most the latest 1000.
	History       []*TimelineEntry `protobuf:"bytes,2,rep,name=history,proto3" json:"history,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *LookupResponse) Reset() {
	*x = LookupResponse{}
	mi := &file_idem_v1_idem_proto_msgTypes[11]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *LookupResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*LookupResponse) ProtoMessage() {}

func (x *LookupResponse) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[11]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use LookupResponse.ProtoReflect.Descriptor instead.
func (*LookupResponse) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{11}
}

func (x *LookupResponse) GetRecord() *Record {
	if x != nil {
		return x.Record
	}
	return nil
}

func (x *LookupResponse) GetHistory() []*TimelineEntry {
	if x != nil {
		return x.History
	}
	return nil
}

// BatchClaimRequest claims many jobs (IdempotencyService.BatchClaim).
type BatchClaimRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The Claims, each as Claim takes it.
	Requests      []*ClaimRequest `protobuf:"bytes,1,rep,name=requests,proto3" json:"requests,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchClaimRequest) Reset() {
	*x = BatchClaimRequest{}
	mi := &file_idem_v1_idem_proto_msgTypes[12]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchClaimRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchClaimRequest) ProtoMessage() {}

func (x *BatchClaimRequest) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[12]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchClaimRequest.ProtoReflect.Descriptor instead.
func (*BatchClaimRequest) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{12}
}

func (x *BatchClaimRequest) GetRequests() []*ClaimRequest {
	if x != nil {
		return x.Requests
	}
	return nil
}

// BatchClaimResponse answers each Claim of a BatchClaimRequest.
type BatchClaimResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// One per request, in the order of the requests.
	Results       []*BatchClaimResult `protobuf:"bytes,1,rep,name=results,proto3" json:"results,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchClaimResponse) Reset() {
	*x = BatchClaimResponse{}
	mi := &file_idem_v1_idem_proto_msgTypes[13]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchClaimResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchClaimResponse) ProtoMessage() {}

func (x *BatchClaimResponse) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[13]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchClaimResponse.ProtoReflect.Descriptor instead.
func (*BatchClaimResponse) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{13}
}

func (x *BatchClaimResponse) GetResults() []*BatchClaimResult {
	if x != nil {
		return x.Results
	}
	return nil
}

// BatchClaimResult is one Claim's answer in a batch.
type BatchClaimResult struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The Claim's response, or its error.
	//
	// Types that are valid to be assigned to Result:
	//
	//	*BatchClaimResult_Response
	//	*BatchClaimResult_Error
	Result        isBatchClaimResult_Result `protobuf_oneof:"result"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchClaimResult) Reset() {
	*x = BatchClaimResult{}
	mi := &file_idem_v1_idem_proto_msgTypes[14]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchClaimResult) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchClaimResult) ProtoMessage() {}

func (x *BatchClaimResult) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[14]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchClaimResult.ProtoReflect.Descriptor instead.
func (*BatchClaimResult) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{14}
}

func (x *BatchClaimResult) GetResult() isBatchClaimResult_Result {
	if x != nil {
		return x.Result
	}
	return nil
}

func (x *BatchClaimResult) GetResponse() *ClaimResponse {
	if x != nil {
		if x, ok := x.Result.(*BatchClaimResult_Response); ok {
			return x.Response
		}
	}
	return nil
}

func (x *BatchClaimResult) GetError() *status.Status {
	if x != nil {
		if x, ok := x.Result.(*BatchClaimResult_Error); ok {
			return x.Error
		}
	}
	return nil
}

type isBatchClaimResult_Result interface {
	isBatchClaimResult_Result()
}

type BatchClaimResult_Response struct {
	// What Claim would have answered.
	Response *ClaimResponse `protobuf:"bytes,1,opt,name=response,proto3,oneof"`
}

type BatchClaimResult_Error struct {
	// The error Claim would have returned, with its ErrorInfo.
	Error *status.Status `protobuf:"bytes,2,opt,name=error,proto3,oneof"`
}

func (*BatchClaimResult_Response) isBatchClaimResult_Result() {}

func (*BatchClaimResult_Error) isBatchClaimResult_Result() {}

// BatchCompleteRequest completes many jobs (IdempotencyService.BatchComplete).
type BatchCompleteRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The Completes, each as Complete takes it.
	Requests      []*CompleteRequest `protobuf:"bytes,1,rep,name=requests,proto3" json:"requests,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchCompleteRequest) Reset() {
	*x = BatchCompleteRequest{}
	mi := &file_idem_v1_idem_proto_msgTypes[15]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchCompleteRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchCompleteRequest) ProtoMessage() {}

func (x *BatchCompleteRequest) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[15]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchCompleteRequest.ProtoReflect.Descriptor instead.
func (*BatchCompleteRequest) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{15}
}

func (x *BatchCompleteRequest) GetRequests() []*CompleteRequest {
	if x != nil {
		return x.Requests
	}
	return nil
}

// BatchCompleteResponse answers each Complete of a BatchCompleteRequest.
type BatchCompleteResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// One per request, in the order of the requests.
	Results       []*BatchCompleteResult `protobuf:"bytes,1,rep,name=results,proto3" json:"results,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchCompleteResponse) Reset() {
	*x = BatchCompleteResponse{}
	mi := &file_idem_v1_idem_proto_msgTypes[16]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchCompleteResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchCompleteResponse) ProtoMessage() {}

func (x *BatchCompleteResponse) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[16]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchCompleteResponse.ProtoReflect.Descriptor instead.
func (*BatchCompleteResponse) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{16}
}

func (x *BatchCompleteResponse) GetResults() []*BatchCompleteResult {
	if x != nil {
		return x.Results
	}
	return nil
}

// BatchCompleteResult is one Complete's answer in a batch.
type BatchCompleteResult struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The Complete's response, or its error.
	//
	// Types that are valid to be assigned to Result:
	//
	//	*BatchCompleteResult_Response
	//	*BatchCompleteResult_Error
	Result        isBatchCompleteResult_Result `protobuf_oneof:"result"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchCompleteResult) Reset() {
	*x = BatchCompleteResult{}
	mi := &file_idem_v1_idem_proto_msgTypes[17]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchCompleteResult) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchCompleteResult) ProtoMessage() {}

func (x *BatchCompleteResult) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[17]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchCompleteResult.ProtoReflect.Descriptor instead.
func (*BatchCompleteResult) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{17}
}

func (x *BatchCompleteResult) GetResult() isBatchCompleteResult_Result {
	if x != nil {
		return x.Result
	}
	return nil
}

func (x *BatchCompleteResult) GetResponse() *CompleteResponse {
	if x != nil {
		if x, ok := x.Result.(*BatchCompleteResult_Response); ok {
			return x.Response
		}
	}
	return nil
}

func (x *BatchCompleteResult) GetError() *status.Status {
	if x != nil {
		if x, ok := x.Result.(*BatchCompleteResult_Error); ok {
			return x.Error
		}
	}
	return nil
}

type isBatchCompleteResult_Result interface {
	isBatchCompleteResult_Result()
}

type BatchCompleteResult_Response struct {
	// What Complete would have answered.
	Response *CompleteResponse `protobuf:"bytes,1,opt,name=response,proto3,oneof"`
}

type BatchCompleteResult_Error struct {
	// The error Complete would have returned, with its ErrorInfo.
	Error *status.Status `protobuf:"bytes,2,opt,name=error,proto3,oneof"`
}

func (*BatchCompleteResult_Response) isBatchCompleteResult_Result() {}

func (*BatchCompleteResult_Error) isBatchCompleteResult_Result() {}

// BatchFailRequest fails many jobs (IdempotencyService.BatchFail).
type BatchFailRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The Fails, each as Fail takes it.
	Requests      []*FailRequest `protobuf:"bytes,1,rep,name=requests,proto3" json:"requests,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchFailRequest) Reset() {
	*x = BatchFailRequest{}
	mi := &file_idem_v1_idem_proto_msgTypes[18]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchFailRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchFailRequest) ProtoMessage() {}

func (x *BatchFailRequest) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[18]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchFailRequest.ProtoReflect.Descriptor instead.
func (*BatchFailRequest) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{18}
}

func (x *BatchFailRequest) GetRequests() []*FailRequest {
	if x != nil {
		return x.Requests
	}
	return nil
}

// BatchFailResponse answers each Fail of a BatchFailRequest.
type BatchFailResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// One per request, in the order of the requests.
	Results       []*BatchFailResult `protobuf:"bytes,1,rep,name=results,proto3" json:"results,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchFailResponse) Reset() {
	*x = BatchFailResponse{}
	mi := &file_idem_v1_idem_proto_msgTypes[19]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchFailResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchFailResponse) ProtoMessage() {}

func (x *BatchFailResponse) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[19]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchFailResponse.ProtoReflect.Descriptor instead.
func (*BatchFailResponse) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{19}
}

func (x *BatchFailResponse) GetResults() []*BatchFailResult {
	if x != nil {
		return x.Results
	}
	return nil
}

// BatchFailResult is one Fail's answer in a batch.
type BatchFailResult struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The Fail's response, or its error.
	//
	// Types that are valid to be assigned to Result:
	//
	//	*BatchFailResult_Response
	//	*BatchFailResult_Error
	Result        isBatchFailResult_Result `protobuf_oneof:"result"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchFailResult) Reset() {
	*x = BatchFailResult{}
	mi := &file_idem_v1_idem_proto_msgTypes[20]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchFailResult) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchFailResult) ProtoMessage() {}

func (x *BatchFailResult) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[20]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchFailResult.ProtoReflect.Descriptor instead.
func (*BatchFailResult) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{20}
}

func (x *BatchFailResult) GetResult() isBatchFailResult_Result {
	if x != nil {
		return x.Result
	}
	return nil
}

func (x *BatchFailResult) GetResponse() *FailResponse {
	if x != nil {
		if x, ok := x.Result.(*BatchFailResult_Response); ok {
			return x.Response
		}
	}
	return nil
}

func (x *BatchFailResult) GetError() *status.Status {
	if x != nil {
		if x, ok := x.Result.(*BatchFailResult_Error); ok {
			return x.Error
		}
	}
	return nil
}

type isBatchFailResult_Result interface {
	isBatchFailResult_Result()
}

type BatchFailResult_Response struct {
	// What Fail would have answered.
	Response *FailResponse `protobuf:"bytes,1,opt,name=response,proto3,oneof"`
}

type BatchFailResult_Error struct {
	// The error Fail would have returned, with its ErrorInfo.
	Error *status.Status `protobuf:"bytes,2,opt,name=error,proto3,oneof"`
}

func (*BatchFailResult_Response) isBatchFailResult_Result() {}

func (*BatchFailResult_Error) isBatchFailResult_Result() {}

// BatchHeartbeatRequest extends many leases (IdempotencyService.BatchHeartbeat).
type BatchHeartbeatRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The Heartbeats, each as Heartbeat takes it.
	Requests      []*HeartbeatRequest `protobuf:"bytes,1,rep,name=requests,proto3" json:"requests,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchHeartbeatRequest) Reset() {
	*x = BatchHeartbeatRequest{}
	mi := &file_idem_v1_idem_proto_msgTypes[21]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchHeartbeatRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchHeartbeatRequest) ProtoMessage() {}

func (x *BatchHeartbeatRequest) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[21]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchHeartbeatRequest.ProtoReflect.Descriptor instead.
func (*BatchHeartbeatRequest) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{21}
}

func (x *BatchHeartbeatRequest) GetRequests() []*HeartbeatRequest {
	if x != nil {
		return x.Requests
	}
	return nil
}

// BatchHeartbeatResponse answers each Heartbeat of a BatchHeartbeatRequest.
type BatchHeartbeatResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// One per request, in the order of the requests.
	Results       []*BatchHeartbeatResult `protobuf:"bytes,1,rep,name=results,proto3" json:"results,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchHeartbeatResponse) Reset() {
	*x = BatchHeartbeatResponse{}
	mi := &file_idem_v1_idem_proto_msgTypes[22]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchHeartbeatResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchHeartbeatResponse) ProtoMessage() {}

func (x *BatchHeartbeatResponse) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[22]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchHeartbeatResponse.ProtoReflect.Descriptor instead.
func (*BatchHeartbeatResponse) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{22}
}

func (x *BatchHeartbeatResponse) GetResults() []*BatchHeartbeatResult {
	if x != nil {
		return x.Results
	}
	return nil
}

// BatchHeartbeatResult is one Heartbeat's answer in a batch.
type BatchHeartbeatResult struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The Heartbeat's response, or its error.
	//
	// Types that are valid to be assigned to Result:
	//
	//	*BatchHeartbeatResult_Response
	//	*BatchHeartbeatResult_Error
	Result        isBatchHeartbeatResult_Result `protobuf_oneof:"result"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchHeartbeatResult) Reset() {
	*x = BatchHeartbeatResult{}
	mi := &file_idem_v1_idem_proto_msgTypes[23]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchHeartbeatResult) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchHeartbeatResult) ProtoMessage() {}

func (x *BatchHeartbeatResult) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[23]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchHeartbeatResult.ProtoReflect.Descriptor instead.
func (*BatchHeartbeatResult) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{23}
}

func (x *BatchHeartbeatResult) GetResult() isBatchHeartbeatResult_Result {
	if x != nil {
		return x.Result
	}
	return nil
}

func (x *BatchHeartbeatResult) GetResponse() *HeartbeatResponse {
	if x != nil {
		if x, ok := x.Result.(*BatchHeartbeatResult_Response); ok {
			return x.Response
		}
	}
	return nil
}

func (x *BatchHeartbeatResult) GetError() *status.Status {
	if x != nil {
		if x, ok := x.Result.(*BatchHeartbeatResult_Error); ok {
			return x.Error
		}
	}
	return nil
}

type isBatchHeartbeatResult_Result interface {
	isBatchHeartbeatResult_Result()
}

type BatchHeartbeatResult_Response struct {
	// What Heartbeat would have answered.
	Response *HeartbeatResponse `protobuf:"bytes,1,opt,name=response,proto3,oneof"`
}

type BatchHeartbeatResult_Error struct {
	// The error Heartbeat would have returned, with its ErrorInfo.
	Error *status.Status `protobuf:"bytes,2,opt,name=error,proto3,oneof"`
}

func (*BatchHeartbeatResult_Response) isBatchHeartbeatResult_Result() {}

func (*BatchHeartbeatResult_Error) isBatchHeartbeatResult_Result() {}

// BatchLookupRequest reads many records (IdempotencyService.BatchLookup).
type BatchLookupRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The Lookups, each as Lookup takes it.
	Requests      []*LookupRequest `protobuf:"bytes,1,rep,name=requests,proto3" json:"requests,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchLookupRequest) Reset() {
	*x = BatchLookupRequest{}
	mi := &file_idem_v1_idem_proto_msgTypes[24]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchLookupRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchLookupRequest) ProtoMessage() {}

func (x *BatchLookupRequest) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[24]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchLookupRequest.ProtoReflect.Descriptor instead.
func (*BatchLookupRequest) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{24}
}

func (x *BatchLookupRequest) GetRequests() []*LookupRequest {
	if x != nil {
		return x.Requests
	}
	return nil
}

// BatchLookupResponse answers each Lookup of a BatchLookupRequest.
type BatchLookupResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// One per request, in the order of the requests.
	Results       []*BatchLookupResult `protobuf:"bytes,1,rep,name=results,proto3" json:"results,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchLookupResponse) Reset() {
	*x = BatchLookupResponse{}
	mi := &file_idem_v1_idem_proto_msgTypes[25]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchLookupResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchLookupResponse) ProtoMessage() {}

func (x *BatchLookupResponse) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[25]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchLookupResponse.ProtoReflect.Descriptor instead.
func (*BatchLookupResponse) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{25}
}

func (x *BatchLookupResponse) GetResults() []*BatchLookupResult {
	if x != nil {
		return x.Results
	}
	return nil
}

// BatchLookupResult is one Lookup's answer in a batch.
type BatchLookupResult struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The Lookup's response, or its error (NOT_FOUND for a record that does
	// not exist).
	//
	// Types that are valid to be assigned to Result:
	//
	//	*BatchLookupResult_Response
	//	*BatchLookupResult_Error
	Result        isBatchLookupResult_Result `protobuf_oneof:"result"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *BatchLookupResult) Reset() {
	*x = BatchLookupResult{}
	mi := &file_idem_v1_idem_proto_msgTypes[26]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *BatchLookupResult) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*BatchLookupResult) ProtoMessage() {}

func (x *BatchLookupResult) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[26]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use BatchLookupResult.ProtoReflect.Descriptor instead.
func (*BatchLookupResult) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{26}
}

func (x *BatchLookupResult) GetResult() isBatchLookupResult_Result {
	if x != nil {
		return x.Result
	}
	return nil
}

func (x *BatchLookupResult) GetResponse() *LookupResponse {
	if x != nil {
		if x, ok := x.Result.(*BatchLookupResult_Response); ok {
			return x.Response
		}
	}
	return nil
}

func (x *BatchLookupResult) GetError() *status.Status {
	if x != nil {
		if x, ok := x.Result.(*BatchLookupResult_Error); ok {
			return x.Error
		}
	}
	return nil
}

type isBatchLookupResult_Result interface {
	isBatchLookupResult_Result()
}

type BatchLookupResult_Response struct {
	// What Lookup would have answered.
	Response *LookupResponse `protobuf:"bytes,1,opt,name=response,proto3,oneof"`
}

type BatchLookupResult_Error struct {
	// The error Lookup would have returned, with its ErrorInfo.
	Error *status.Status `protobuf:"bytes,2,opt,name=error,proto3,oneof"`
}

func (*BatchLookupResult_Response) isBatchLookupResult_Result() {}

func (*BatchLookupResult_Error) isBatchLookupResult_Result() {}

// StartStepRequest marks a step of a held job STARTED.
type StartStepRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The namespace of the Claim.
	Namespace string `protobuf:"bytes,1,opt,name=namespace,proto3" json:"namespace,omitempty"`
	// The key of the Claim.
	Key string `protobuf:"bytes,2,opt,name=key,proto3" json:"key,omitempty"`
	// The token of the ACQUIRED outcome.
	Token int64 `protobuf:"varint,3,opt,name=token,proto3" json:"token,omitempty"`
	// The step's name: 1 to 128 bytes of UTF-8 without control characters
	// (INVALID_ARGUMENT / INVALID_STEP_NAME otherwise), unique in the job.
	// Its bytes count toward the job's --max-step-bytes.
	Step          string `protobuf:"bytes,4,opt,name=step,proto3" json:"step,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *StartStepRequest) Reset() {
	*x = StartStepRequest{}
	mi := &file_idem_v1_idem_proto_msgTypes[27]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *StartStepRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*StartStepRequest) ProtoMessage() {}

func (x *StartStepRequest) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[27]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use StartStepRequest.ProtoReflect.Descriptor instead.
func (*StartStepRequest) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{27}
}

func (x *StartStepRequest) GetNamespace() string {
	if x != nil {
		return x.Namespace
	}
	return ""
}

func (x *StartStepRequest) GetKey() string {
	if x != nil {
		return x.Key
	}
	return ""
}

func (x *StartStepRequest) GetToken() int64 {
	if x != nil {
		return x.Token
	}
	return 0
}

func (x *StartStepRequest) GetStep() string {
	if x != nil {
		return x.Step
	}
	return ""
}

// StartStepResponse carries the step as stored.
type StartStepResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The step, STARTED.
	Step          *Step `protobuf:"bytes,1,opt,name=step,proto3" json:"step,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *StartStepResponse) Reset() {
	*x = StartStepResponse{}
	mi := &file_idem_v1_idem_proto_msgTypes[28]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *StartStepResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*StartStepResponse) ProtoMessage() {}

func (x *StartStepResponse) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[28]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use StartStepResponse.ProtoReflect.Descriptor instead.
func (*StartStepResponse) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{28}
}

func (x *StartStepResponse) GetStep() *Step {
	if x != nil {
		return x.Step
	}
	return nil
}

// CompleteStepRequest records a step of a held job FINISHED.
type CompleteStepRequest struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The namespace of the Claim.
	Namespace string `protobuf:"bytes,1,opt,name=namespace,proto3" json:"namespace,omitempty"`
	// The key of the Claim.
	Key string `protobuf:"bytes,2,opt,name=key,proto3" json:"key,omitempty"`
	// The token of the ACQUIRED outcome.
	Token int64 `protobuf:"varint,3,opt,name=token,proto3" json:"token,omitempty"`
	// The step's name, as StartStep takes it.
	Step string `protobuf:"bytes,4,opt,name=step,proto3" json:"step,omitempty"`
	// The step's result: opaque bytes, at most the server's result limit
	// (INVALID_ARGUMENT / INVALID_RESULT). A job's steps hold at most
	// --max-step-bytes (64 KiB by default) of names and results together,
	// and at most --max-steps (64 by default) steps (RESOURCE_EXHAUSTED /
	// STEPS_TOO_LARGE, TOO_MANY_STEPS).
	Result        []byte `protobuf:"bytes,5,opt,name=result,proto3" json:"result,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *CompleteStepRequest) Reset() {
	*x = CompleteStepRequest{}
	mi := &file_idem_v1_idem_proto_msgTypes[29]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *CompleteStepRequest) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*CompleteStepRequest) ProtoMessage() {}

func (x *CompleteStepRequest) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[29]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use CompleteStepRequest.ProtoReflect.Descriptor instead.
func (*CompleteStepRequest) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{29}
}

func (x *CompleteStepRequest) GetNamespace() string {
	if x != nil {
		return x.Namespace
	}
	return ""
}

func (x *CompleteStepRequest) GetKey() string {
	if x != nil {
		return x.Key
	}
	return ""
}

func (x *CompleteStepRequest) GetToken() int64 {
	if x != nil {
		return x.Token
	}
	return 0
}

func (x *CompleteStepRequest) GetStep() string {
	if x != nil {
		return x.Step
	}
	return ""
}

func (x *CompleteStepRequest) GetResult() []byte {
	if x != nil {
		return x.Result
	}
	return nil
}

// CompleteStepResponse carries the step as stored.
type CompleteStepResponse struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The step, FINISHED.
	Step          *Step `protobuf:"bytes,1,opt,name=step,proto3" json:"step,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *CompleteStepResponse) Reset() {
	*x = CompleteStepResponse{}
	mi := &file_idem_v1_idem_proto_msgTypes[30]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *CompleteStepResponse) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*CompleteStepResponse) ProtoMessage() {}

func (x *CompleteStepResponse) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[30]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use CompleteStepResponse.ProtoReflect.Descriptor instead.
func (*CompleteStepResponse) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{30}
}

func (x *CompleteStepResponse) GetStep() *Step {
	if x != nil {
		return x.Step
	}
	return nil
}

// TimelineEntry is one exception in the life of a record's key: what
// happened, when, and who did it. The ordinary path (a Claim that creates
// the record, a Complete by its holder, a Heartbeat, a Claim answered from
// the record) leaves no entry. Entries live as long as their record and are
// purged with it. A deleted record's entries, its DELETED entry last, stay
// under the key: they are shown with the next record of the key and purged
// with it, or, when no record of the key follows, dropped once the deleted
// record's retention has passed since the deletion.
type TimelineEntry struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// What happened.
	Kind TimelineEntryKind `protobuf:"varint,1,opt,name=kind,proto3,enum=idem.v1.TimelineEntryKind" json:"kind,omitempty"`
	// When, by the store's clock.
	At *timestamppb.Timestamp `protobuf:"bytes,2,opt,name=at,proto3" json:"at,omitempty"`
	// The record's token when it happened; for TAKEN_OVER, the new one.
	Token int64 `protobuf:"varint,3,opt,name=token,proto3" json:"token,omitempty"`
	// The state it left the record in; STATE_UNSPECIFIED for DELETED.
	State State `protobuf:"varint,4,opt,name=state,proto3,enum=idem.v1.State" json:"state,omitempty"`
	// TAKEN_OVER: the token taken over.
	PreviousToken int64 `protobuf:"varint,5,opt,name=previous_token,json=previousToken,proto3" json:"previous_token,omitempty"`
	// TAKEN_OVER: the state the record was taken over from (PROCESSING: its
	// lease had run out; EXPIRED; RELEASED). RESOLVED: UNRESOLVED. DELETED:
	// the state it was deleted in. HELD: PROCESSING.
	PreviousState State `protobuf:"varint,6,opt,name=previous_state,json=previousState,proto3,enum=idem.v1.State" json:"previous_state,omitempty"`
	// TAKEN_OVER: the new holder's claimant. FAILED, RELEASED, HELD: the
	// holder's. FINGERPRINT_MISMATCH: the refused Claim's.
	Claimant string `protobuf:"bytes,7,opt,name=claimant,proto3" json:"claimant,omitempty"`
	// TAKEN_OVER: the claimant of the lease taken over.
	PreviousClaimant string `protobuf:"bytes,8,opt,name=previous_claimant,json=previousClaimant,proto3" json:"previous_claimant,omitempty"`
	// FAILED, RELEASED: the holder's error. RESOLVED as FAILED: the
	// resolution's error.
	Error string `protobuf:"bytes,9,opt,name=error,proto3" json:"error,omitempty"`
	// RESOLVED, DELETED: who made the call.
	Actor *Actor `protobuf:"bytes,10,opt,name=actor,proto3" json:"actor,omitempty"`
	// RESOLVED, DELETED: the free-text reason the call gave; may be empty.
	Reason string `protobuf:"bytes,11,opt,name=reason,proto3" json:"reason,omitempty"`
	// FINGERPRINT_MISMATCH: the fingerprint the refused Claim carried (the
	// record keeps its own).
	Fingerprint   []byte `protobuf:"bytes,12,opt,name=fingerprint,proto3" json:"fingerprint,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *TimelineEntry) Reset() {
	*x = TimelineEntry{}
	mi := &file_idem_v1_idem_proto_msgTypes[31]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *TimelineEntry) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*TimelineEntry) ProtoMessage() {}

func (x *TimelineEntry) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[31]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use TimelineEntry.ProtoReflect.Descriptor instead.
func (*TimelineEntry) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{31}
}

func (x *TimelineEntry) GetKind() TimelineEntryKind {
	if x != nil {
		return x.Kind
	}
	return TimelineEntryKind_TIMELINE_ENTRY_KIND_UNSPECIFIED
}

func (x *TimelineEntry) GetAt() *timestamppb.Timestamp {
	if x != nil {
		return x.At
	}
	return nil
}

func (x *TimelineEntry) GetToken() int64 {
	if x != nil {
		return x.Token
	}
	return 0
}

func (x *TimelineEntry) GetState() State {
	if x != nil {
		return x.State
	}
	return State_STATE_UNSPECIFIED
}

func (x *TimelineEntry) GetPreviousToken() int64 {
	if x != nil {
		return x.PreviousToken
	}
	return 0
}

func (x *TimelineEntry) GetPreviousState() State {
	if x != nil {
		return x.PreviousState
	}
	return State_STATE_UNSPECIFIED
}

func (x *TimelineEntry) GetClaimant() string {
	if x != nil {
		return x.Claimant
	}
	return ""
}

func (x *TimelineEntry) GetPreviousClaimant() string {
	if x != nil {
		return x.PreviousClaimant
	}
	return ""
}

func (x *TimelineEntry) GetError() string {
	if x != nil {
		return x.Error
	}
	return ""
}

func (x *TimelineEntry) GetActor() *Actor {
	if x != nil {
		return x.Actor
	}
	return nil
}

func (x *TimelineEntry) GetReason() string {
	if x != nil {
		return x.Reason
	}
	return ""
}

func (x *TimelineEntry) GetFingerprint() []byte {
	if x != nil {
		return x.Fingerprint
	}
	return nil
}

// Actor is who made a call that a timeline entry records.
type Actor struct {
	state protoimpl.MessageState `protogen:"open.v1"`
	// The caller's tenant.
	Tenant string `protobuf:"bytes,1,opt,name=tenant,proto3" json:"tenant,omitempty"`
	// The name idemd's config gives the caller's token (named_tokens); empty
	// for a token without one, or a client certificate.
	Operator string `protobuf:"bytes,2,opt,name=operator,proto3" json:"operator,omitempty"`
	// The name the resolver gave (ResolverService.Resolve); empty for a
	// person's call.
	Resolver      string `protobuf:"bytes,3,opt,name=resolver,proto3" json:"resolver,omitempty"`
	unknownFields protoimpl.UnknownFields
	sizeCache     protoimpl.SizeCache
}

func (x *Actor) Reset() {
	*x = Actor{}
	mi := &file_idem_v1_idem_proto_msgTypes[32]
	ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
	ms.StoreMessageInfo(mi)
}

func (x *Actor) String() string {
	return protoimpl.X.MessageStringOf(x)
}

func (*Actor) ProtoMessage() {}

func (x *Actor) ProtoReflect() protoreflect.Message {
	mi := &file_idem_v1_idem_proto_msgTypes[32]
	if x != nil {
		ms := protoimpl.X.MessageStateOf(protoimpl.Pointer(x))
		if ms.LoadMessageInfo() == nil {
			ms.StoreMessageInfo(mi)
		}
		return ms
	}
	return mi.MessageOf(x)
}

// Deprecated: Use Actor.ProtoReflect.Descriptor instead.
func (*Actor) Descriptor() ([]byte, []int) {
	return file_idem_v1_idem_proto_rawDescGZIP(), []int{32}
}

func (x *Actor) GetTenant() string {
	if x != nil {
		return x.Tenant
	}
	return ""
}

func (x *Actor) GetOperator() string {
	if x != nil {
		return x.Operator
	}
	return ""
}

func (x *Actor) GetResolver() string {
	if x != nil {
		return x.Resolver
	}
	return ""
}

var File_idem_v1_idem_proto protoreflect.FileDescriptor

const file_idem_v1_idem_proto_rawDesc = "" +
	"\n" +
	"\x12idem/v1/idem.proto\x12\aidem.v1\x1a\x1cgoogle/api/annotations.proto\x1a\x1egoogle/protobuf/duration.proto\x1a\x1fgoogle/protobuf/timestamp.proto\x1a\x17google/rpc/status.proto\"\xc2\x05\n" +
	"\x06Record\x12\x1c\n" +
	"\tnamespace\x18\x01 \x01(\tR\tnamespace\x12\x10\n" +
	"\x03key\x18\x02 \x01(\tR\x03key\x12$\n" +
	"\x05state\x18\x03 \x01(\x0e2\x0e.idem.v1.StateR\x05state\x12\x14\n" +
	"\x05token\x18\x04 \x01(\x03R\x05token\x12\x18\n" +
	"\aattempt\x18\x05 \x01(\x05R\aattempt\x12\x1a\n" +
	"\bclaimant\x18\x06 \x01(\tR\bclaimant\x12 \n" +
	"\vfingerprint\x18\a \x01(\fR\vfingerprint\x12D\n" +
	"\x10lease_expires_at\x18\b \x01(\v2\x1a.google.protobuf.TimestampR\x0eleaseExpiresAt\x12\x16\n" +
	"\x06result\x18\t \x01(\fR\x06result\x12\x14\n" +
	"\x05error\x18\n" +
	" \x01(\tR\x05error\x129\n" +
	"\n" +
	"created_at\x18\v \x01(\v2\x1a.google.protobuf.TimestampR\tcreatedAt\x129\n" +
	"\n" +
	"updated_at\x18\f \x01(\v2\x1a.google.protobuf.TimestampR\tupdatedAt\x12=\n" +
	"\fcompleted_at\x18\r \x01(\v2\x1a.google.protobuf.TimestampR\vcompletedAt\x129\n" +
	"\n" +
	"expires_at\x18\x0e \x01(\v2\x1a.google.protobuf.TimestampR\texpiresAt\x12\x16\n" +
	"\x06policy\x18\x0f \x01(\tR\x06policy\x12\x16\n" +
	"\x06tenant\x18\x10 \x01(\tR\x06tenant\x12\x12\n" +
	"\x04hold\x18\x11 \x01(\bR\x04hold\x12#\n" +
	"\x05steps\x18\x1e \x03(\v2\r.idem.v1.StepR\x05steps\x12'\n" +
	"\x0fhold_unfinished\x18\x1f \x01(\bR\x0eholdUnfinished\"\xea\x01\n" +
	"\x04Step\x12\x12\n" +
	"\x04name\x18\x01 \x01(\tR\x04name\x12(\n" +
	"\x05state\x18\x02 \x01(\x0e2\x12.idem.v1.StepStateR\x05state\x12\x16\n" +
	"\x06result\x18\x03 \x01(\fR\x06result\x12\x14\n" +
	"\x05token\x18\x04 \x01(\x03R\x05token\x129\n" +
	"\n" +
	"started_at\x18\x05 \x01(\v2\x1a.google.protobuf.TimestampR\tstartedAt\x12;\n" +
	"\vfinished_at\x18\x06 \x01(\v2\x1a.google.protobuf.TimestampR\n" +
	"finishedAt\"\x9c\x02\n" +
	"\fClaimRequest\x12\x1c\n" +
	"\tnamespace\x18\x01 \x01(\tR\tnamespace\x12\x10\n" +
	"\x03key\x18\x02 \x01(\tR\x03key\x12 \n" +
	"\vfingerprint\x18\x03 \x01(\fR\vfingerprint\x126\n" +
	"\tlease_ttl\x18\x04 \x01(\v2\x19.google.protobuf.DurationR\bleaseTtl\x12\x1a\n" +
	"\bclaimant\x18\x05 \x01(\tR\bclaimant\x127\n" +
	"\tretention\x18\x06 \x01(\v2\x19.google.protobuf.DurationR\tretention\x12-\n" +
	"\x04wait\x18\a \x01(\v2\x19.google.protobuf.DurationR\x04wait\"\xa0\x01\n" +
	"\rClaimResponse\x12*\n" +
	"\aoutcome\x18\x01 \x01(\x0e2\x10.idem.v1.OutcomeR\aoutcome\x12'\n" +
	"\x06record\x18\x02 \x01(\v2\x0f.idem.v1.RecordR\x06record\x12:\n" +
	"\vretry_after\x18\x03 \x01(\v2\x19.google.protobuf.DurationR\n" +
	"retryAfter\"o\n" +
	"\x0fCompleteRequest\x12\x1c\n" +
	"\tnamespace\x18\x01 \x01(\tR\tnamespace\x12\x10\n" +
	"\x03key\x18\x02 \x01(\tR\x03key\x12\x14\n" +
	"\x05token\x18\x03 \x01(\x03R\x05token\x12\x16\n" +
	"\x06result\x18\x04 \x01(\fR\x06result\";\n" +
	"\x10CompleteResponse\x12'\n" +
	"\x06record\x18\x01 \x01(\v2\x0f.idem.v1.RecordR\x06record\"\x87\x01\n" +
	"\vFailRequest\x12\x1c\n" +
	"\tnamespace\x18\x01 \x01(\tR\tnamespace\x12\x10\n" +
	"\x03key\x18\x02 \x01(\tR\x03key\x12\x14\n" +
	"\x05token\x18\x03 \x01(\x03R\x05token\x12\x14\n" +
	"\x05error\x18\x04 \x01(\tR\x05error\x12\x1c\n" +
	"\tretryable\x18\x05 \x01(\bR\tretryable\"7\n" +
	"\fFailResponse\x12'\n" +
	"\x06record\x18\x01 \x01(\v2\x0f.idem.v1.RecordR\x06record\"\x90\x01\n" +
	"\x10HeartbeatRequest\x12\x1c\n" +
	"\tnamespace\x18\x01 \x01(\tR\tnamespace\x12\x10\n" +
	"\x03key\x18\x02 \x01(\tR\x03key\x12\x14\n" +
	"\x05token\x18\x03 \x01(\x03R\x05token\x126\n" +
	"\tlease_ttl\x18\x04 \x01(\v2\x19.google.protobuf.DurationR\bleaseTtl\"<\n" +
	"\x11HeartbeatResponse\x12'\n" +
	"\x06record\x18\x01 \x01(\v2\x0f.idem.v1.RecordR\x06record\"h\n" +
	"\rLookupRequest\x12\x1c\n" +
	"\tnamespace\x18\x01 \x01(\tR\tnamespace\x12\x10\n" +
	"\x03key\x18\x02 \x01(\tR\x03key\x12'\n" +
	"\x0finclude_history\x18\x03 \x01(\bR\x0eincludeHistory\"k\n" +
	"\x0eLookupResponse\x12'\n" +
	"\x06record\x18\x01 \x01(\v2\x0f.idem.v1.RecordR\x06record\x120\n" +
	"\ahistory\x18\x02 \x03(\v2\x16.idem.v1.TimelineEntryR\ahistory\"F\n" +
	"\x11BatchClaimRequest\x121\n" +
	"\brequests\x18\x01 \x03(\v2\x15.idem.v1.ClaimRequestR\brequests\"I\n" +
	"\x12BatchClaimResponse\x123\n" +
	"\aresults\x18\x01 \x03(\v2\x19.idem.v1.BatchClaimResultR\aresults\"~\n" +
	"\x10BatchClaimResult\x124\n" +
	"\bresponse\x18\x01 \x01(\v2\x16.idem.v1.ClaimResponseH\x00R\bresponse\x12*\n" +
	"\x05error\x18\x02 \x01(\v2\x12.google.rpc.StatusH\x00R\x05errorB\b\n" +
	"\x06result\"L\n" +
	"\x14BatchCompleteRequest\x124\n" +
	"\brequests\x18\x01 \x03(\v2\x18.idem.v1.CompleteRequestR\brequests\"O\n" +
	"\x15BatchCompleteResponse\x126\n" +
	"\aresults\x18\x01 \x03(\v2\x1c.idem.v1.BatchCompleteResultR\aresults\"\x84\x01\n" +
	"\x13BatchCompleteResult\x127\n" +
	"\bresponse\x18\x01 \x01(\v2\x19.idem.v1.CompleteResponseH\x00R\bresponse\x12*\n" +
	"\x05error\x18\x02 \x01(\v2\x12.google.rpc.StatusH\x00R\x05errorB\b\n" +
	"\x06result\"D\n" +
	"\x10BatchFailRequest\x120\n" +
	"\brequests\x18\x01 \x03(\v2\x14.idem.v1.FailRequestR\brequests\"G\n" +
	"\x11BatchFailResponse\x122\n" +
	"\aresults\x18\x01 \x03(\v2\x18.idem.v1.BatchFailResultR\aresults\"|\n" +
	"\x0fBatchFailResult\x123\n" +
	"\bresponse\x18\x01 \x01(\v2\x15.idem.v1.FailResponseH\x00R\bresponse\x12*\n" +
	"\x05error\x18\x02 \x01(\v2\x12.google.rpc.StatusH\x00R\x05errorB\b\n" +
	"\x06result\"N\n" +
	"\x15BatchHeartbeatRequest\x125\n" +
	"\brequests\x18\x01 \x03(\v2\x19.idem.v1.HeartbeatRequestR\brequests\"Q\n" +
	"\x16BatchHeartbeatResponse\x127\n" +
	"\aresults\x18\x01 \x03(\v2\x1d.idem.v1.BatchHeartbeatResultR\aresults\"\x86\x01\n" +
	"\x14BatchHeartbeatResult\x128\n" +
	"\bresponse\x18\x01 \x01(\v2\x1a.idem.v1.HeartbeatResponseH\x00R\bresponse\x12*\n" +
	"\x05error\x18\x02 \x01(\v2\x12.google.rpc.StatusH\x00R\x05errorB\b\n" +
	"\x06result\"H\n" +
	"\x12BatchLookupRequest\x122\n" +
	"\brequests\x18\x01 \x03(\v2\x16.idem.v1.LookupRequestR\brequests\"K\n" +
	"\x13BatchLookupResponse\x124\n" +
	"\aresults\x18\x01 \x03(\v2\x1a.idem.v1.BatchLookupResultR\aresults\"\x80\x01\n" +
	"\x11BatchLookupResult\x125\n" +
	"\bresponse\x18\x01 \x01(\v2\x17.idem.v1.LookupResponseH\x00R\bresponse\x12*\n" +
	"\x05error\x18\x02 \x01(\v2\x12.google.rpc.StatusH\x00R\x05errorB\b\n" +
	"\x06result\"l\n" +
	"\x10StartStepRequest\x12\x1c\n" +
	"\tnamespace\x18\x01 \x01(\tR\tnamespace\x12\x10\n" +
	"\x03key\x18\x02 \x01(\tR\x03key\x12\x14\n" +
	"\x05token\x18\x03 \x01(\x03R\x05token\x12\x12\n" +
	"\x04step\x18\x04 \x01(\tR\x04step\"6\n" +
	"\x11StartStepResponse\x12!\n" +
	"\x04step\x18\x01 \x01(\v2\r.idem.v1.StepR\x04step\"\x87\x01\n" +
	"\x13CompleteStepRequest\x12\x1c\n" +
	"\tnamespace\x18\x01 \x01(\tR\tnamespace\x12\x10\n" +
	"\x03key\x18\x02 \x01(\tR\x03key\x12\x14\n" +
	"\x05token\x18\x03 \x01(\x03R\x05token\x12\x12\n" +
	"\x04step\x18\x04 \x01(\tR\x04step\x12\x16\n" +
	"\x06result\x18\x05 \x01(\fR\x06result\"9\n" +
	"\x14CompleteStepResponse\x12!\n" +
	"\x04step\x18\x01 \x01(\v2\r.idem.v1.StepR\x04step\"\xc4\x03\n" +
	"\rTimelineEntry\x12.\n" +
	"\x04kind\x18\x01 \x01(\x0e2\x1a.idem.v1.TimelineEntryKindR\x04kind\x12*\n" +
	"\x02at\x18\x02 \x01(\v2\x1a.google.protobuf.TimestampR\x02at\x12\x14\n" +
	"\x05token\x18\x03 \x01(\x03R\x05token\x12$\n" +
	"\x05state\x18\x04 \x01(\x0e2\x0e.idem.v1.StateR\x05state\x12%\n" +
	"\x0eprevious_token\x18\x05 \x01(\x03R\rpreviousToken\x125\n" +
	"\x0eprevious_state\x18\x06 \x01(\x0e2\x0e.idem.v1.StateR\rpreviousState\x12\x1a\n" +
	"\bclaimant\x18\a \x01(\tR\bclaimant\x12+\n" +
	"\x11previous_claimant\x18\b \x01(\tR\x10previousClaimant\x12\x14\n" +
	"\x05error\x18\t \x01(\tR\x05error\x12$\n" +
	"\x05actor\x18\n" +
	" \x01(\v2\x0e.idem.v1.ActorR\x05actor\x12\x16\n" +
	"\x06reason\x18\v \x01(\tR\x06reason\x12 \n" +
	"\vfingerprint\x18\f \x01(\fR\vfingerprint\"W\n" +
	"\x05Actor\x12\x16\n" +
	"\x06tenant\x18\x01 \x01(\tR\x06tenant\x12\x1a\n" +
	"\boperator\x18\x02 \x01(\tR\boperator\x12\x1a\n" +
	"\bresolver\x18\x03 \x01(\tR\bresolver*\x98\x01\n" +
	"\x05State\x12\x15\n" +
	"\x11STATE_UNSPECIFIED\x10\x00\x12\x14\n" +
	"\x10STATE_PROCESSING\x10\x01\x12\x13\n" +
	"\x0fSTATE_COMPLETED\x10\x02\x12\x10\n" +
	"\fSTATE_FAILED\x10\x03\x12\x12\n" +
	"\x0eSTATE_RELEASED\x10\x04\x12\x11\n" +
	"\rSTATE_EXPIRED\x10\x05\x12\x14\n" +
	"\x10STATE_UNRESOLVED\x10\x06*\x94\x01\n" +
	"\aOutcome\x12\x17\n" +
	"\x13OUTCOME_UNSPECIFIED\x10\x00\x12\x14\n" +
	"\x10OUTCOME_ACQUIRED\x10\x01\x12\x17\n" +
	"\x13OUTCOME_IN_PROGRESS\x10\x02\x12\x15\n" +
	"\x11OUTCOME_COMPLETED\x10\x03\x12\x12\n" +
	"\x0eOUTCOME_FAILED\x10\x04\x12\x16\n" +
	"\x12OUTCOME_UNRESOLVED\x10\x05*X\n" +
	"\tStepState\x12\x1a\n" +
	"\x16STEP_STATE_UNSPECIFIED\x10\x00\x12\x16\n" +
	"\x12STEP_STATE_STARTED\x10\x01\x12\x17\n" +
	"\x13STEP_STATE_FINISHED\x10\x02*\xad\x02\n" +
	"\x11TimelineEntryKind\x12#\n" +
	"\x1fTIMELINE_ENTRY_KIND_UNSPECIFIED\x10\x00\x12\"\n" +
	"\x1eTIMELINE_ENTRY_KIND_TAKEN_OVER\x10\x01\x12\x1e\n" +
	"\x1aTIMELINE_ENTRY_KIND_FAILED\x10\x02\x12 \n" +
	"\x1cTIMELINE_ENTRY_KIND_RELEASED\x10\x03\x12\x1c\n" +
	"\x18TIMELINE_ENTRY_KIND_HELD\x10\x04\x12 \n" +
	"\x1cTIMELINE_ENTRY_KIND_RESOLVED\x10\x05\x12\x1f\n" +
	"\x1bTIMELINE_ENTRY_KIND_DELETED\x10\x06\x12,\n" +
	"(TIMELINE_ENTRY_KIND_FINGERPRINT_MISMATCH\x10\a2\xba\v\n" +
	"\x12IdempotencyService\x12q\n" +
	"\x05Claim\x12\x15.idem.v1.ClaimRequest\x1a\x16.idem.v1.ClaimResponse\"9\x82\xd3\xe4\x93\x023:\x01*\"./v1/namespaces/{namespace}/records/{key}:claim\x12}\n" +
	"\bComplete\x12\x18.idem.v1.CompleteRequest\x1a\x19.idem.v1.CompleteResponse\"<\x82\xd3\xe4\x93\x026:\x01*\"1/v1/namespaces/{namespace}/records/{key}:complete\x12m\n" +
	"\x04Fail\x12\x14.idem.v1.FailRequest\x1a\x15.idem.v1.FailResponse\"8\x82\xd3\xe4\x93\x022:\x01*\"-/v1/namespaces/{namespace}/records/{key}:fail\x12\x81\x01\n" +
	"\tHeartbeat\x12\x19.idem.v1.HeartbeatRequest\x1a\x1a.idem.v1.HeartbeatResponse\"=\x82\xd3\xe4\x93\x027:\x01*\"2/v1/namespaces/{namespace}/records/{key}:heartbeat\x12k\n" +
	"\x06Lookup\x12\x16.idem.v1.LookupRequest\x1a\x17.idem.v1.LookupResponse\"0\x82\xd3\xe4\x93\x02*\x12(/v1/namespaces/{namespace}/records/{key}\x12h\n" +
	"\n" +
	"BatchClaim\x12\x1a.idem.v1.BatchClaimRequest\x1a\x1b.idem.v1.BatchClaimResponse\"!\x82\xd3\xe4\x93\x02\x1b:\x01*\"\x16/v1/records:batchClaim\x12t\n" +
	"\rBatchComplete\x12\x1d.idem.v1.BatchCompleteRequest\x1a\x1e.idem.v1.BatchCompleteResponse\"$\x82\xd3\xe4\x93\x02\x1e:\x01*\"\x19/v1/records:batchComplete\x12d\n" +
	"\tBatchFail\x12\x19.idem.v1.BatchFailRequest\x1a\x1a.idem.v1.BatchFailResponse\" \x82\xd3\xe4\x93\x02\x1a:\x01*\"\x15/v1/records:batchFail\x12x\n" +
	"\x0eBatchHeartbeat\x12\x1e.idem.v1.BatchHeartbeatRequest\x1a\x1f.idem.v1.BatchHeartbeatResponse\"%\x82\xd3\xe4\x93\x02\x1f:\x01*\"\x1a/v1/records:batchHeartbeat\x12l\n" +
	"\vBatchLookup\x12\x1b.idem.v1.BatchLookupRequest\x1a\x1c.idem.v1.BatchLookupResponse\"\"\x82\xd3\xe4\x93\x02\x1c:\x01*\"\x17/v1/records:batchLookup\x12\x8a\x01\n" +
	"\tStartStep\x12\x19.idem.v1.StartStepRequest\x1a\x1a.idem.v1.StartStepResponse\"F\x82\xd3\xe4\x93\x02@:\x01*\";/v1/namespaces/{namespace}/records/{key}/steps/{step}:start\x12\x96\x01\n" +
	"\fCompleteStep\x12\x1c.idem.v1.CompleteStepRequest\x1a\x1d.idem.v1.CompleteStepResponse\"I\x82\xd3\xe4\x93\x02C:\x01*\">/v1/namespaces/{namespace}/records/{key}/steps/{step}:completeB\x80\x01\n" +
	"\vcom.idem.v1B\tIdemProtoP\x01Z)github.com/idemhq/idem/gen/idem/v1;idemv1\xa2\x02\x03IXX\xaa\x02\aIdem.V1\xca\x02\aIdem\\V1\xe2\x02\x13Idem\\V1\\GPBMetadata\xea\x02\bIdem::V1b\x06proto3"

var (
	file_idem_v1_idem_proto_rawDescOnce sync.Once
	file_idem_v1_idem_proto_rawDescData []byte
)

func file_idem_v1_idem_proto_rawDescGZIP() []byte {
	file_idem_v1_idem_proto_rawDescOnce.Do(func() {
		file_idem_v1_idem_proto_rawDescData = protoimpl.X.CompressGZIP(unsafe.Slice(unsafe.StringData(file_idem_v1_idem_proto_rawDesc), len(file_idem_v1_idem_proto_rawDesc)))
	})
	return file_idem_v1_idem_proto_rawDescData
}

var file_idem_v1_idem_proto_enumTypes = make([]protoimpl.EnumInfo, 4)
var file_idem_v1_idem_proto_msgTypes = make([]protoimpl.MessageInfo, 33)
var file_idem_v1_idem_proto_goTypes = []any{
	(State)(0),                     // 0: idem.v1.State
	(Outcome)(0),                   // 1: idem.v1.Outcome
	(StepState)(0),                 // 2: idem.v1.StepState
	(TimelineEntryKind)(0),         // 3: idem.v1.TimelineEntryKind
	(*Record)(nil),                 // 4: idem.v1.Record
	(*Step)(nil),                   // 5: idem.v1.Step
	(*ClaimRequest)(nil),           // 6: idem.v1.ClaimRequest
	(*ClaimResponse)(nil),          // 7: idem.v1.ClaimResponse
	(*CompleteRequest)(nil),        // 8: idem.v1.CompleteRequest
	(*CompleteResponse)(nil),       // 9: idem.v1.CompleteResponse
	(*FailRequest)(nil),            // 10: idem.v1.FailRequest
	(*FailResponse)(nil),           // 11: idem.v1.FailResponse
	(*HeartbeatRequest)(nil),       // 12: idem.v1.HeartbeatRequest
	(*HeartbeatResponse)(nil),      // 13: idem.v1.HeartbeatResponse
	(*LookupRequest)(nil),          // 14: idem.v1.LookupRequest
	(*LookupResponse)(nil),         // 15: idem.v1.LookupResponse
	(*BatchClaimRequest)(nil),      // 16: idem.v1.BatchClaimRequest
	(*BatchClaimResponse)(nil),     // 17: idem.v1.BatchClaimResponse
	(*BatchClaimResult)(nil),       // 18: idem.v1.BatchClaimResult
	(*BatchCompleteRequest)(nil),   // 19: idem.v1.BatchCompleteRequest
	(*BatchCompleteResponse)(nil),  // 20: idem.v1.BatchCompleteResponse
	(*BatchCompleteResult)(nil),    // 21: idem.v1.BatchCompleteResult
	(*BatchFailRequest)(nil),       // 22: idem.v1.BatchFailRequest
	(*BatchFailResponse)(nil),      // 23: idem.v1.BatchFailResponse
	(*BatchFailResult)(nil),        // 24: idem.v1.BatchFailResult
	(*BatchHeartbeatRequest)(nil),  // 25: idem.v1.BatchHeartbeatRequest
	(*BatchHeartbeatResponse)(nil), // 26: idem.v1.BatchHeartbeatResponse
	(*BatchHeartbeatResult)(nil),   // 27: idem.v1.BatchHeartbeatResult
	(*BatchLookupRequest)(nil),     // 28: idem.v1.BatchLookupRequest
	(*BatchLookupResponse)(nil),    // 29: idem.v1.BatchLookupResponse
	(*BatchLookupResult)(nil),      // 30: idem.v1.BatchLookupResult
	(*StartStepRequest)(nil),       // 31: idem.v1.StartStepRequest
	(*StartStepResponse)(nil),      // 32: idem.v1.StartStepResponse
	(*CompleteStepRequest)(nil),    // 33: idem.v1.CompleteStepRequest
	(*CompleteStepResponse)(nil),   // 34: idem.v1.CompleteStepResponse
	(*TimelineEntry)(nil),          // 35: idem.v1.TimelineEntry
	(*Actor)(nil),                  // 36: idem.v1.Actor
	(*timestamppb.Timestamp)(nil),  // 37: google.protobuf.Timestamp
	(*durationpb.Duration)(nil),    // 38: google.protobuf.Duration
	(*status.Status)(nil),          // 39: google.rpc.Status
}
var file_idem_v1_idem_proto_depIdxs = []int32{
	0,  // 0: idem.v1.Record.state:type_name -> idem.v1.State
	37, // 1: idem.v1.Record.lease_expires_at:type_name -> google.protobuf.Timestamp
	37, // 2: idem.v1.Record.created_at:type_name -> google.protobuf.Timestamp
	37, // 3: idem.v1.Record.updated_at:type_name -> google.protobuf.Timestamp
	37, // 4: idem.v1.Record.completed_at:type_name -> google.protobuf.Timestamp
	37, // 5: idem.v1.Record.expires_at:type_name -> google.protobuf.Timestamp
	5,  // 6: idem.v1.Record.steps:type_name -> idem.v1.Step
	2,  // 7: idem.v1.Step.state:type_name -> idem.v1.StepState
	37, // 8: idem.v1.Step.started_at:type_name -> google.protobuf.Timestamp
	37, // 9: idem.v1.Step.finished_at:type_name -> google.protobuf.Timestamp
	38, // 10: idem.v1.ClaimRequest.lease_ttl:type_name -> google.protobuf.Duration
	38, // 11: idem.v1.ClaimRequest.retention:type_name -> google.protobuf.Duration
	38, // 12: idem.v1.ClaimRequest.wait:type_name -> google.protobuf.Duration
	1,  // 13: idem.v1.ClaimResponse.outcome:type_name -> idem.v1.Outcome
	4,  // 14: idem.v1.ClaimResponse.record:type_name -> idem.v1.Record
	38, // 15: idem.v1.ClaimResponse.retry_after:type_name -> google.protobuf.Duration
	4,  // 16: idem.v1.CompleteResponse.record:type_name -> idem.v1.Record
	4,  // 17: idem.v1.FailResponse.record:type_name -> idem.v1.Record
	38, // 18: idem.v1.HeartbeatRequest.lease_ttl:type_name -> google.protobuf.Duration
	4,  // 19: idem.v1.HeartbeatResponse.record:type_name -> idem.v1.Record
	4,  // 20: idem.v1.LookupResponse.record:type_name -> idem.v1.Record
	35, // 21: idem.v1.LookupResponse.history:type_name -> idem.v1.TimelineEntry
	6,  // 22: idem.v1.BatchClaimRequest.requests:type_name -> idem.v1.ClaimRequest
	18, // 23: idem.v1.BatchClaimResponse.results:type_name -> idem.v1.BatchClaimResult
	7,  // 24: idem.v1.BatchClaimResult.response:type_name -> idem.v1.ClaimResponse
	39, // 25: idem.v1.BatchClaimResult.error:type_name -> google.rpc.Status
	8,  // 26: idem.v1.BatchCompleteRequest.requests:type_name -> idem.v1.CompleteRequest
	21, // 27: idem.v1.BatchCompleteResponse.results:type_name -> idem.v1.BatchCompleteResult
	9,  // 28: idem.v1.BatchCompleteResult.response:type_name -> idem.v1.CompleteResponse
	39, // 29: idem.v1.BatchCompleteResult.error:type_name -> google.rpc.Status
	10, // 30: idem.v1.BatchFailRequest.requests:type_name -> idem.v1.FailRequest
	24, // 31: idem.v1.BatchFailResponse.results:type_name -> idem.v1.BatchFailResult
	11, // 32: idem.v1.BatchFailResult.response:type_name -> idem.v1.FailResponse
	39, // 33: idem.v1.BatchFailResult.error:type_name -> google.rpc.Status
	12, // 34: idem.v1.BatchHeartbeatRequest.requests:type_name -> idem.v1.HeartbeatRequest
	27, // 35: idem.v1.BatchHeartbeatResponse.results:type_name -> idem.v1.BatchHeartbeatResult
	13, // 36: idem.v1.BatchHeartbeatResult.response:type_name -> idem.v1.HeartbeatResponse
	39, // 37: idem.v1.BatchHeartbeatResult.error:type_name -> google.rpc.Status
	14, // 38: idem.v1.BatchLookupRequest.requests:type_name -> idem.v1.LookupRequest
	30, // 39: idem.v1.BatchLookupResponse.results:type_name -> idem.v1.BatchLookupResult
	15, // 40: idem.v1.BatchLookupResult.response:type_name -> idem.v1.LookupResponse
	39, // 41: idem.v1.BatchLookupResult.error:type_name -> google.rpc.Status
	5,  // 42: idem.v1.StartStepResponse.step:type_name -> idem.v1.Step
	5,  // 43: idem.v1.CompleteStepResponse.step:type_name -> idem.v1.Step
	3,  // 44: idem.v1.TimelineEntry.kind:type_name -> idem.v1.TimelineEntryKind
	37, // 45: idem.v1.TimelineEntry.at:type_name -> google.protobuf.Timestamp
	0,  // 46: idem.v1.TimelineEntry.state:type_name -> idem.v1.State
	0,  // 47: idem.v1.TimelineEntry.previous_state:type_name -> idem.v1.State
	36, // 48: idem.v1.TimelineEntry.actor:type_name -> idem.v1.Actor
	6,  // 49: idem.v1.IdempotencyService.Claim:input_type -> idem.v1.ClaimRequest
	8,  // 50: idem.v1.IdempotencyService.Complete:input_type -> idem.v1.CompleteRequest
	10, // 51: idem.v1.IdempotencyService.Fail:input_type -> idem.v1.FailRequest
	12, // 52: idem.v1.IdempotencyService.Heartbeat:input_type -> idem.v1.HeartbeatRequest
	14, // 53: idem.v1.IdempotencyService.Lookup:input_type -> idem.v1.LookupRequest
	16, // 54: idem.v1.IdempotencyService.BatchClaim:input_type -> idem.v1.BatchClaimRequest
	19, // 55: idem.v1.IdempotencyService.BatchComplete:input_type -> idem.v1.BatchCompleteRequest
	22, // 56: idem.v1.IdempotencyService.BatchFail:input_type -> idem.v1.BatchFailRequest
	25, // 57: idem.v1.IdempotencyService.BatchHeartbeat:input_type -> idem.v1.BatchHeartbeatRequest
	28, // 58: idem.v1.IdempotencyService.BatchLookup:input_type -> idem.v1.BatchLookupRequest
	31, // 59: idem.v1.IdempotencyService.StartStep:input_type -> idem.v1.StartStepRequest
	33, // 60: idem.v1.IdempotencyService.CompleteStep:input_type -> idem.v1.CompleteStepRequest
	7,  // 61: idem.v1.IdempotencyService.Claim:output_type -> idem.v1.ClaimResponse
	9,  // 62: idem.v1.IdempotencyService.Complete:output_type -> idem.v1.CompleteResponse
	11, // 63: idem.v1.IdempotencyService.Fail:output_type -> idem.v1.FailResponse
	13, // 64: idem.v1.IdempotencyService.Heartbeat:output_type -> idem.v1.HeartbeatResponse
	15, // 65: idem.v1.IdempotencyService.Lookup:output_type -> idem.v1.LookupResponse
	17, // 66: idem.v1.IdempotencyService.BatchClaim:output_type -> idem.v1.BatchClaimResponse
	20, // 67: idem.v1.IdempotencyService.BatchComplete:output_type -> idem.v1.BatchCompleteResponse
	23, // 68: idem.v1.IdempotencyService.BatchFail:output_type -> idem.v1.BatchFailResponse
	26, // 69: idem.v1.IdempotencyService.BatchHeartbeat:output_type -> idem.v1.BatchHeartbeatResponse
	29, // 70: idem.v1.IdempotencyService.BatchLookup:output_type -> idem.v1.BatchLookupResponse
	32, // 71: idem.v1.IdempotencyService.StartStep:output_type -> idem.v1.StartStepResponse
	34, // 72: idem.v1.IdempotencyService.CompleteStep:output_type -> idem.v1.CompleteStepResponse
	61, // [61:73] is the sub-list for method output_type
	49, // [49:61] is the sub-list for method input_type
	49, // [49:49] is the sub-list for extension type_name
	49, // [49:49] is the sub-list for extension extendee
	0,  // [0:49] is the sub-list for field type_name
}

func init() { file_idem_v1_idem_proto_init() }
func file_idem_v1_idem_proto_init() {
	if File_idem_v1_idem_proto != nil {
		return
	}
	file_idem_v1_idem_proto_msgTypes[14].OneofWrappers = []any{
		(*BatchClaimResult_Response)(nil),
		(*BatchClaimResult_Error)(nil),
	}
	file_idem_v1_idem_proto_msgTypes[17].OneofWrappers = []any{
		(*BatchCompleteResult_Response)(nil),
		(*BatchCompleteResult_Error)(nil),
	}
	file_idem_v1_idem_proto_msgTypes[20].OneofWrappers = []any{
		(*BatchFailResult_Response)(nil),
		(*BatchFailResult_Error)(nil),
	}
	file_idem_v1_idem_proto_msgTypes[23].OneofWrappers = []any{
		(*BatchHeartbeatResult_Response)(nil),
		(*BatchHeartbeatResult_Error)(nil),
	}
	file_idem_v1_idem_proto_msgTypes[26].OneofWrappers = []any{
		(*BatchLookupResult_Response)(nil),
		(*BatchLookupResult_Error)(nil),
	}
	type x struct{}
	out := protoimpl.TypeBuilder{
		File: protoimpl.DescBuilder{
			GoPackagePath: reflect.TypeOf(x{}).PkgPath(),
			RawDescriptor: unsafe.Slice(unsafe.StringData(file_idem_v1_idem_proto_rawDesc), len(file_idem_v1_idem_proto_rawDesc)),
			NumEnums:      4,
			NumMessages:   33,
			NumExtensions: 0,
			NumServices:   1,
		},
		GoTypes:           file_idem_v1_idem_proto_goTypes,
		DependencyIndexes: file_idem_v1_idem_proto_depIdxs,
		EnumInfos:         file_idem_v1_idem_proto_enumTypes,
		MessageInfos:      file_idem_v1_idem_proto_msgTypes,
	}.Build()
	File_idem_v1_idem_proto = out.File
	file_idem_v1_idem_proto_goTypes = nil
	file_idem_v1_idem_proto_depIdxs = nil
}
