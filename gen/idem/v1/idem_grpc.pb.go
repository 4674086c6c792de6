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

// Code generated by protoc-gen-go-grpc. DO NOT EDIT.
// versions:
// - protoc-gen-go-grpc v1.6.2
// - protoc             (unknown)
// source: idem/v1/idem.proto

package idemv1

import (
	context "context"
	grpc "google.golang.org/grpc"
	codes "google.golang.org/grpc/codes"
	status "google.golang.org/grpc/status"
)

// This is a compile-time assertion to ensure that this generated file
// is compatible with the grpc package it is being compiled against.
// Requires gRPC-Go v1.64.0 or later.
const _ = grpc.SupportPackageIsVersion9

const (
	IdempotencyService_Claim_FullMethodName          = "/idem.v1.IdempotencyService/Claim"
	IdempotencyService_Complete_FullMethodName       = "/idem.v1.IdempotencyService/Complete"
	IdempotencyService_Fail_FullMethodName           = "/idem.v1.IdempotencyService/Fail"
	IdempotencyService_Heartbeat_FullMethodName      = "/idem.v1.IdempotencyService/Heartbeat"
	IdempotencyService_Lookup_FullMethodName         = "/idem.v1.IdempotencyService/Lookup"
	IdempotencyService_BatchClaim_FullMethodName     = "/idem.v1.IdempotencyService/BatchClaim"
	IdempotencyService_BatchComplete_FullMethodName  = "/idem.v1.IdempotencyService/BatchComplete"
	IdempotencyService_BatchFail_FullMethodName      = "/idem.v1.IdempotencyService/BatchFail"
	IdempotencyService_BatchHeartbeat_FullMethodName = "/idem.v1.IdempotencyService/BatchHeartbeat"
	IdempotencyService_BatchLookup_FullMethodName    = "/idem.v1.IdempotencyService/BatchLookup"
	IdempotencyService_StartStep_FullMethodName      = "/idem.v1.IdempotencyService/StartStep"
	IdempotencyService_CompleteStep_FullMethodName   = "/idem.v1.IdempotencyService/CompleteStep"
)

// IdempotencyServiceClient is the client API for IdempotencyService service.
//
// For semantics around ctx use and closing/ending streaming RPCs, please refer to https://pkg.go.dev/google.golang.org/grpc/?tab=doc#ClientConn.NewStream.
//
// IdempotencyService coordinates workers so that each job's side effect
// happens once.
type IdempotencyServiceClient interface {
	// Claim asks for the right to perform the job identified by namespace and
	// key. It is one atomic step: it creates the record, or takes over a
	// RELEASED or EXPIRED record or one whose lease ran out, or reports the
	// existing record. A record whose policy holds it (Record.hold) is never
	// taken over: once its lease runs out it is UNRESOLVED (this Claim makes it
	// so if the sweeper has not) and the answer is OUTCOME_UNRESOLVED. See
	// Outcome for what to do with each answer.
	Claim(ctx context.Context, in *ClaimRequest, opts ...grpc.CallOption) (*ClaimResponse, error)
	// Complete records the job's success and its result. Only the current
	// token's holder may call it. Repeating it with the same token after a
	// lost response returns the stored record unchanged.
	Complete(ctx context.Context, in *CompleteRequest, opts ...grpc.CallOption) (*CompleteResponse, error)
	// Fail records the job's failure. With retryable=true the record becomes
	// RELEASED and the next Claim acquires it; otherwise it becomes FAILED and
	// every later Claim replays the error. Repeating it with the same token
	// returns the stored record unchanged.
	Fail(ctx context.Context, in *FailRequest, opts ...grpc.CallOption) (*FailResponse, error)
	// Heartbeat extends the lease of a long-running job. Call it well before
	// the lease runs out (the Go SDK calls it every third of the lease). On an
	// EXPIRED record that nobody took over it makes the record PROCESSING
	// again.
	Heartbeat(ctx context.Context, in *HeartbeatRequest, opts ...grpc.CallOption) (*HeartbeatResponse, error)
	// Lookup reads a record without changing it.
	Lookup(ctx context.Context, in *LookupRequest, opts ...grpc.CallOption) (*LookupResponse, error)
	// BatchClaim is Claim for many jobs. An item's wait must be unset or 0
	// (INVALID_ARGUMENT / INVALID_WAIT otherwise): a batch answers at once.
	BatchClaim(ctx context.Context, in *BatchClaimRequest, opts ...grpc.CallOption) (*BatchClaimResponse, error)
	// BatchComplete is Complete for many jobs.
	BatchComplete(ctx context.Context, in *BatchCompleteRequest, opts ...grpc.CallOption) (*BatchCompleteResponse, error)
	// BatchFail is Fail for many jobs.
	BatchFail(ctx context.Context, in *BatchFailRequest, opts ...grpc.CallOption) (*BatchFailResponse, error)
	// BatchHeartbeat is Heartbeat for many jobs: it keeps a whole delivery's
	// leases alive while its jobs run.
	BatchHeartbeat(ctx context.Context, in *BatchHeartbeatRequest, opts ...grpc.CallOption) (*BatchHeartbeatResponse, error)
	// BatchLookup is Lookup for many records.
	BatchLookup(ctx context.Context, in *BatchLookupRequest, opts ...grpc.CallOption) (*BatchLookupResponse, error)
	// StartStep marks a step STARTED before its effect, so that a successor
	// can tell "finished" from "may have happened".
	StartStep(ctx context.Context, in *StartStepRequest, opts ...grpc.CallOption) (*StartStepResponse, error)
	// CompleteStep records a step FINISHED with its result, whether or not
	// it was started.
	CompleteStep(ctx context.Context, in *CompleteStepRequest, opts ...grpc.CallOption) (*CompleteStepResponse, error)
}

type idempotencyServiceClient struct {
	cc grpc.ClientConnInterface
}

func NewIdempotencyServiceClient(cc grpc.ClientConnInterface) IdempotencyServiceClient {
	return &idempotencyServiceClient{cc}
}

func (c *idempotencyServiceClient) Claim(ctx context.Context, in *ClaimRequest, opts ...grpc.CallOption) (*ClaimResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(ClaimResponse)
	err := c.cc.Invoke(ctx, IdempotencyService_Claim_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *idempotencyServiceClient) Complete(ctx context.Context, in *CompleteRequest, opts ...grpc.CallOption) (*CompleteResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(CompleteResponse)
	err := c.cc.Invoke(ctx, IdempotencyService_Complete_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *idempotencyServiceClient) Fail(ctx context.Context, in *FailRequest, opts ...grpc.CallOption) (*FailResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(FailResponse)
	err := c.cc.Invoke(ctx, IdempotencyService_Fail_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *idempotencyServiceClient) Heartbeat(ctx context.Context, in *HeartbeatRequest, opts ...grpc.CallOption) (*HeartbeatResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(HeartbeatResponse)
	err := c.cc.Invoke(ctx, IdempotencyService_Heartbeat_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *idempotencyServiceClient) Lookup(ctx context.Context, in *LookupRequest, opts ...grpc.CallOption) (*LookupResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(LookupResponse)
	err := c.cc.Invoke(ctx, IdempotencyService_Lookup_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *idempotencyServiceClient) BatchClaim(ctx context.Context, in *BatchClaimRequest, opts ...grpc.CallOption) (*BatchClaimResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(BatchClaimResponse)
	err := c.cc.Invoke(ctx, IdempotencyService_BatchClaim_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *idempotencyServiceClient) BatchComplete(ctx context.Context, in *BatchCompleteRequest, opts ...grpc.CallOption) (*BatchCompleteResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(BatchCompleteResponse)
	err := c.cc.Invoke(ctx, IdempotencyService_BatchComplete_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *idempotencyServiceClient) BatchFail(ctx context.Context, in *BatchFailRequest, opts ...grpc.CallOption) (*BatchFailResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(BatchFailResponse)
	err := c.cc.Invoke(ctx, IdempotencyService_BatchFail_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *idempotencyServiceClient) BatchHeartbeat(ctx context.Context, in *BatchHeartbeatRequest, opts ...grpc.CallOption) (*BatchHeartbeatResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(BatchHeartbeatResponse)
	err := c.cc.Invoke(ctx, IdempotencyService_BatchHeartbeat_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *idempotencyServiceClient) BatchLookup(ctx context.Context, in *BatchLookupRequest, opts ...grpc.CallOption) (*BatchLookupResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(BatchLookupResponse)
	err := c.cc.Invoke(ctx, IdempotencyService_BatchLookup_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *idempotencyServiceClient) StartStep(ctx context.Context, in *StartStepRequest, opts ...grpc.CallOption) (*StartStepResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(StartStepResponse)
	err := c.cc.Invoke(ctx, IdempotencyService_StartStep_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *idempotencyServiceClient) CompleteStep(ctx context.Context, in *CompleteStepRequest, opts ...grpc.CallOption) (*CompleteStepResponse, error) {
	cOpts := append([]grpc.CallOption{grpc.StaticMethod()}, opts...)
	out := new(CompleteStepResponse)
	err := c.cc.Invoke(ctx, IdempotencyService_CompleteStep_FullMethodName, in, out, cOpts...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// IdempotencyServiceServer is the server API for IdempotencyService service.
// All implementations must embed UnimplementedIdempotencyServiceServer
// for forward compatibility.
//
// IdempotencyService coordinates workers so that each job's side effect
// happens once.
type IdempotencyServiceServer interface {
	// Claim asks for the right to perform the job identified by namespace and
	// key. It is one atomic step: it creates the record, or takes over a
	// RELEASED or EXPIRED record or one whose lease ran out, or reports the
	// existing record. A record whose policy holds it (Record.hold) is never
	// taken over: once its lease runs out it is UNRESOLVED (this Claim makes it
	// so if the sweeper has not) and the answer is OUTCOME_UNRESOLVED. See
	// Outcome for what to do with each answer.
	Claim(context.Context, *ClaimRequest) (*ClaimResponse, error)
	// Complete records the job's success and its result. Only the current
	// token's holder may call it. Repeating it with the same token after a
	// lost response returns the stored record unchanged.
	Complete(context.Context, *CompleteRequest) (*CompleteResponse, error)
	// Fail records the job's failure. With retryable=true the record becomes
	// RELEASED and the next Claim acquires it; otherwise it becomes FAILED and
	// every later Claim replays the error. Repeating it with the same token
	// returns the stored record unchanged.
	Fail(context.Context, *FailRequest) (*FailResponse, error)
	// Heartbeat extends the lease of a long-running job. Call it well before
	// the lease runs out (the Go SDK calls it every third of the lease). On an
	// EXPIRED record that nobody took over it makes the record PROCESSING
	// again.
	Heartbeat(context.Context, *HeartbeatRequest) (*HeartbeatResponse, error)
	// Lookup reads a record without changing it.
	Lookup(context.Context, *LookupRequest) (*LookupResponse, error)
	// BatchClaim is Claim for many jobs. An item's wait must be unset or 0
	// (INVALID_ARGUMENT / INVALID_WAIT otherwise): a batch answers at once.
	BatchClaim(context.Context, *BatchClaimRequest) (*BatchClaimResponse, error)
	// BatchComplete is Complete for many jobs.
	BatchComplete(context.Context, *BatchCompleteRequest) (*BatchCompleteResponse, error)
	// BatchFail is Fail for many jobs.
	BatchFail(context.Context, *BatchFailRequest) (*BatchFailResponse, error)
	// BatchHeartbeat is Heartbeat for many jobs: it keeps a whole delivery's
	// leases alive while its jobs run.
	BatchHeartbeat(context.Context, *BatchHeartbeatRequest) (*BatchHeartbeatResponse, error)
	// BatchLookup is Lookup for many records.
	BatchLookup(context.Context, *BatchLookupRequest) (*BatchLookupResponse, error)
	// StartStep marks a step STARTED before its effect, so that a successor
	// can tell "finished" from "may have happened".
	StartStep(context.Context, *StartStepRequest) (*StartStepResponse, error)
	// CompleteStep records a step FINISHED with its result, whether or not
	// it was started.
	CompleteStep(context.Context, *CompleteStepRequest) (*CompleteStepResponse, error)
	mustEmbedUnimplementedIdempotencyServiceServer()
}

// UnimplementedIdempotencyServiceServer must be embedded to have
// forward compatible implementations.
//
// NOTE: this should be embedded by value instead of pointer to avoid a nil
// pointer dereference when methods are called.
type UnimplementedIdempotencyServiceServer struct{}

func (UnimplementedIdempotencyServiceServer) Claim(context.Context, *ClaimRequest) (*ClaimResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method Claim not implemented")
}
func (UnimplementedIdempotencyServiceServer) Complete(context.Context, *CompleteRequest) (*CompleteResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method Complete not implemented")
}
func (UnimplementedIdempotencyServiceServer) Fail(context.Context, *FailRequest) (*FailResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method Fail not implemented")
}
func (UnimplementedIdempotencyServiceServer) Heartbeat(context.Context, *HeartbeatRequest) (*HeartbeatResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method Heartbeat not implemented")
}
func (UnimplementedIdempotencyServiceServer) Lookup(context.Context, *LookupRequest) (*LookupResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method Lookup not implemented")
}
func (UnimplementedIdempotencyServiceServer) BatchClaim(context.Context, *BatchClaimRequest) (*BatchClaimResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method BatchClaim not implemented")
}
func (UnimplementedIdempotencyServiceServer) BatchComplete(context.Context, *BatchCompleteRequest) (*BatchCompleteResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method BatchComplete not implemented")
}
func (UnimplementedIdempotencyServiceServer) BatchFail(context.Context, *BatchFailRequest) (*BatchFailResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method BatchFail not implemented")
}
func (UnimplementedIdempotencyServiceServer) BatchHeartbeat(context.Context, *BatchHeartbeatRequest) (*BatchHeartbeatResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method BatchHeartbeat not implemented")
}
func (UnimplementedIdempotencyServiceServer) BatchLookup(context.Context, *BatchLookupRequest) (*BatchLookupResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method BatchLookup not implemented")
}
func (UnimplementedIdempotencyServiceServer) StartStep(context.Context, *StartStepRequest) (*StartStepResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method StartStep not implemented")
}
func (UnimplementedIdempotencyServiceServer) CompleteStep(context.Context, *CompleteStepRequest) (*CompleteStepResponse, error) {
	return nil, status.Error(codes.Unimplemented, "method CompleteStep not implemented")
}
func (UnimplementedIdempotencyServiceServer) mustEmbedUnimplementedIdempotencyServiceServer() {}
func (UnimplementedIdempotencyServiceServer) testEmbeddedByValue()                            {}

// UnsafeIdempotencyServiceServer may be embedded to opt out of forward compatibility for this service.
// Use of this interface is not recommended, as added methods to IdempotencyServiceServer will
// result in compilation errors.
type UnsafeIdempotencyServiceServer interface {
	mustEmbedUnimplementedIdempotencyServiceServer()
}

func RegisterIdempotencyServiceServer(s grpc.ServiceRegistrar, srv IdempotencyServiceServer) {
	// If the following call panics, it indicates UnimplementedIdempotencyServiceServer was
	// embedded by pointer and is nil.  This will cause panics if an
	// unimplemented method is ever invoked, so we test this at initialization
	// time to prevent it from happening at runtime later due to I/O.
	if t, ok := srv.(interface{ testEmbeddedByValue() }); ok {
		t.testEmbeddedByValue()
	}
	s.RegisterService(&IdempotencyService_ServiceDesc, srv)
}

func _IdempotencyService_Claim_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(ClaimRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(IdempotencyServiceServer).Claim(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: IdempotencyService_Claim_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(IdempotencyServiceServer).Claim(ctx, req.(*ClaimRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _IdempotencyService_Complete_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(CompleteRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(IdempotencyServiceServer).Complete(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: IdempotencyService_Complete_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(IdempotencyServiceServer).Complete(ctx, req.(*CompleteRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _IdempotencyService_Fail_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(FailRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(IdempotencyServiceServer).Fail(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: IdempotencyService_Fail_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(IdempotencyServiceServer).Fail(ctx, req.(*FailRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _IdempotencyService_Heartbeat_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(HeartbeatRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(IdempotencyServiceServer).Heartbeat(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: IdempotencyService_Heartbeat_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(IdempotencyServiceServer).Heartbeat(ctx, req.(*HeartbeatRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _IdempotencyService_Lookup_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(LookupRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(IdempotencyServiceServer).Lookup(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: IdempotencyService_Lookup_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(IdempotencyServiceServer).Lookup(ctx, req.(*LookupRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _IdempotencyService_BatchClaim_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(BatchClaimRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(IdempotencyServiceServer).BatchClaim(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: IdempotencyService_BatchClaim_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(IdempotencyServiceServer).BatchClaim(ctx, req.(*BatchClaimRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _IdempotencyService_BatchComplete_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(BatchCompleteRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(IdempotencyServiceServer).BatchComplete(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: IdempotencyService_BatchComplete_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(IdempotencyServiceServer).BatchComplete(ctx, req.(*BatchCompleteRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _IdempotencyService_BatchFail_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(BatchFailRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(IdempotencyServiceServer).BatchFail(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: IdempotencyService_BatchFail_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(IdempotencyServiceServer).BatchFail(ctx, req.(*BatchFailRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _IdempotencyService_BatchHeartbeat_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(BatchHeartbeatRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(IdempotencyServiceServer).BatchHeartbeat(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: IdempotencyService_BatchHeartbeat_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(IdempotencyServiceServer).BatchHeartbeat(ctx, req.(*BatchHeartbeatRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _IdempotencyService_BatchLookup_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(BatchLookupRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(IdempotencyServiceServer).BatchLookup(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: IdempotencyService_BatchLookup_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(IdempotencyServiceServer).BatchLookup(ctx, req.(*BatchLookupRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _IdempotencyService_StartStep_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(StartStepRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(IdempotencyServiceServer).StartStep(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: IdempotencyService_StartStep_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(IdempotencyServiceServer).StartStep(ctx, req.(*StartStepRequest))
	}
	return interceptor(ctx, in, info, handler)
}

func _IdempotencyService_CompleteStep_Handler(srv interface{}, ctx context.Context, dec func(interface{}) error, interceptor grpc.UnaryServerInterceptor) (interface{}, error) {
	in := new(CompleteStepRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return srv.(IdempotencyServiceServer).CompleteStep(ctx, in)
	}
	info := &grpc.UnaryServerInfo{
		Server:     srv,
		FullMethod: IdempotencyService_CompleteStep_FullMethodName,
	}
	handler := func(ctx context.Context, req interface{}) (interface{}, error) {
		return srv.(IdempotencyServiceServer).CompleteStep(ctx, req.(*CompleteStepRequest))
	}
	return interceptor(ctx, in, info, handler)
}

// IdempotencyService_ServiceDesc is the grpc.ServiceDesc for IdempotencyService service.
// It's only intended for direct use with grpc.RegisterService,
// and not to be introspected or modified (even as a copy)
var IdempotencyService_ServiceDesc = grpc.ServiceDesc{
	ServiceName: "idem.v1.IdempotencyService",
	HandlerType: (*IdempotencyServiceServer)(nil),
	Methods: []grpc.MethodDesc{
		{
			MethodName: "Claim",
			Handler:    _IdempotencyService_Claim_Handler,
		},
		{
			MethodName: "Complete",
			Handler:    _IdempotencyService_Complete_Handler,
		},
		{
			MethodName: "Fail",
			Handler:    _IdempotencyService_Fail_Handler,
		},
		{
			MethodName: "Heartbeat",
			Handler:    _IdempotencyService_Heartbeat_Handler,
		},
		{
			MethodName: "Lookup",
			Handler:    _IdempotencyService_Lookup_Handler,
		},
		{
			MethodName: "BatchClaim",
			Handler:    _IdempotencyService_BatchClaim_Handler,
		},
		{
			MethodName: "BatchComplete",
			Handler:    _IdempotencyService_BatchComplete_Handler,
		},
		{
			MethodName: "BatchFail",
			Handler:    _IdempotencyService_BatchFail_Handler,
		},
		{
			MethodName: "BatchHeartbeat",
			Handler:    _IdempotencyService_BatchHeartbeat_Handler,
		},
		{
			MethodName: "BatchLookup",
			Handler:    _IdempotencyService_BatchLookup_Handler,
		},
		{
			MethodName: "StartStep",
			Handler:    _IdempotencyService_StartStep_Handler,
		},
		{
			MethodName: "CompleteStep",
			Handler:    _IdempotencyService_CompleteStep_Handler,
		},
	},
	Streams:  []grpc.StreamDesc{},
	Metadata: "idem/v1/idem.proto",
}
