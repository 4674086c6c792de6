package services

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/idemhq/idem/config"
	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/store"
)

// Page sizes and bounds of ListRecords.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
	// MaxOlderThan bounds ListRecords' older_than: far longer than any
	// record lives (retention is at most 90 days), and short enough that
	// now minus it is a time every store can compute.
	MaxOlderThan = 10 * 365 * 24 * time.Hour
	// maxListScan bounds the records one ListRecords reads for a tenant
	// whose namespace allow-list hides some of them, so that a page costs a
	// bounded amount of work however many hidden records lie in its way.
	maxListScan = 10 * MaxPageSize
)

// AdminService implements idem.v1.AdminService over the caller's tenant, or,
// for an operator, over the tenants a call names (targetTenants).
type AdminService struct {
	idemv1.UnimplementedAdminServiceServer

	store  store.Store
	logger *slog.Logger
	// tenants, when set, admits only admin tenants (AdminOnly), and holds
	// every call to the namespace allow-list of the caller's tenant, as the
	// IdempotencyService does: a namespace outside it is PERMISSION_DENIED /
	// NAMESPACE_NOT_ALLOWED, and a listing or a count without a namespace
	// shows only the namespaces it admits. Nil (single-tenant mode) admits
	// every caller and every namespace.
	tenants *Tenants
	// maxResultBytes bounds the result of ResolveRecord's completed, as it
	// bounds Complete's.
	maxResultBytes int
	// crossTenant writes the lines of operators' calls across tenants.
	crossTenant crossTenantLog
}

var _ idemv1.AdminServiceServer = (*AdminService)(nil)

// NewAdminService returns the admin service over st, for the tenants and
// the result limit of cfg, the Config the IdempotencyService beside it
// takes (its zero fields are the defaults, as for NewService).
func NewAdminService(st store.Store, cfg Config, logger *slog.Logger) *AdminService {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.WithDefaults()
	return &AdminService{store: st, logger: logger, tenants: cfg.Tenants, maxResultBytes: cfg.MaxResultBytes}
}

func (a *AdminService) authorize(ctx context.Context) error {
	return a.tenants.AdminOnly(ctx)
}

// allowList returns the caller's tenant when it has a namespace allow-list,
// nil when every namespace is open to it.
func (a *AdminService) allowList(ctx context.Context) *Tenant {
	t := a.tenants.callerTenant(ctx)
	if t == nil || t.namespaces == nil {
		return nil
	}
	return t
}

// checkNamespace refuses a namespace outside the caller's allow-list.
func (a *AdminService) checkNamespace(ctx context.Context, namespace string) error {
	if t := a.allowList(ctx); t != nil && !t.allows(namespace) {
		return namespaceNotAllowed(t.name, namespace)
	}
	return nil
}

var stateFromProto = map[idemv1.State]store.State{
	idemv1.State_STATE_PROCESSING: store.StateProcessing,
	idemv1.State_STATE_COMPLETED:  store.StateCompleted,
	idemv1.State_STATE_FAILED:     store.StateFailed,
	idemv1.State_STATE_RELEASED:   store.StateReleased,
	idemv1.State_STATE_EXPIRED:    store.StateExpired,
	idemv1.State_STATE_UNRESOLVED: store.StateUnresolved,
}

// ListRecords implements idem.v1.AdminService.
func (a *AdminService) ListRecords(ctx context.Context, req *idemv1.ListRecordsRequest) (*idemv1.ListRecordsResponse, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	tenants, err := a.targetTenants(ctx, "ListRecords", req.GetTenant(), req.GetAllTenants())
	if err != nil {
		return nil, err
	}
	p := &store.ListParams{Tenant: tenants[0], Namespace: req.GetNamespace(), Limit: DefaultPageSize}
	if p.Namespace != "" {
		if err := validateNamespace(p.Namespace); err != nil {
			return nil, err
		}
		if err := a.checkNamespace(ctx, p.Namespace); err != nil {
			return nil, err
		}
	}
	if err := validateKeyPrefix(req.GetKeyPrefix()); err != nil {
		return nil, err
	}
	p.KeyPrefix = req.GetKeyPrefix()
	if st := req.GetState(); st != idemv1.State_STATE_UNSPECIFIED {
		s, ok := stateFromProto[st]
		if !ok {
			return nil, invalid("state", idemv1.ErrorReason_ERROR_REASON_INVALID_STATE, "state %d is not a known State", st)
		}
		p.State = s
	}
	if d := req.GetOlderThan(); d != nil {
		if d.CheckValid() != nil || d.AsDuration() < 0 || d.AsDuration() > MaxOlderThan {
			return nil, invalid("older_than", idemv1.ErrorReason_ERROR_REASON_INVALID_OLDER_THAN, "older_than is %s; it must be between 0s and %s (10 years)",
				durationText(d), MaxOlderThan)
		}
		p.OlderThan = d.AsDuration()
	}
	if n := req.GetPageSize(); n != 0 {
		if n < 1 || n > MaxPageSize {
			return nil, invalid("page_size", idemv1.ErrorReason_ERROR_REASON_INVALID_PAGE_SIZE, "page_size is %d; it must be between 1 and %d", n, MaxPageSize)
		}
		p.Limit = int(n)
	}
	if tok := req.GetPageToken(); tok != "" {
		after, ok := decodePageToken(tok, req.GetAllTenants())
		if !ok {
			return nil, invalid("page_token", idemv1.ErrorReason_ERROR_REASON_INVALID_PAGE_TOKEN, "page_token is not one this server returned; start again with an empty page_token")
		}
		p.After = after
	}
	var t *Tenant
	if p.Namespace == "" {
		t = a.allowList(ctx)
	}
	var recs []*store.Record
	var next *store.RecordID
	if req.GetAllTenants() {
		recs, next, err = a.listTenants(ctx, p, t, tenants)
	} else {
		recs, next, err = a.list(ctx, p, t)
	}
	if err != nil {
		return nil, rewriteError(ctx, a.logger, err)
	}
	resp := &idemv1.ListRecordsResponse{}
	if next != nil {
		resp.NextPageToken = encodePageToken(*next, req.GetAllTenants())
	}
	resp.Records = make([]*idemv1.Record, len(recs))
	for i, r := range recs {
		resp.Records[i] = adminRecordToProto(r)
	}
	return resp, nil
}

// list reads one page of p.Limit records. With t (a tenant with an
// allow-list, listing every namespace) it skips the records of namespaces t
// may not see, reading further until the page is full; after maxListScan
// records it stops with a shorter page, possibly empty, and a next page.
// next is where the next page starts, nil when this page is the last.
func (a *AdminService) list(ctx context.Context, p *store.ListParams, t *Tenant) (page []*store.Record, next *store.RecordID, err error) {
	want := p.Limit
	q := *p
	// One more than the page tells whether another page follows.
	q.Limit = want + 1
	scanned := 0
	for {
		recs, err := a.store.RecordList(ctx, &q)
		if err != nil {
			return nil, nil, err
		}
		for _, r := range recs {
			scanned++
			if t != nil && !t.allows(r.Namespace) {
				continue
			}
			if len(page) == want {
				last := page[want-1].RecordID
				return page, &last, nil
			}
			page = append(page, r)
		}
		if len(recs) < q.Limit {
			return page, nil, nil
		}
		q.After = recs[len(recs)-1].RecordID
		if scanned >= maxListScan {
			return page, &q.After, nil
		}
	}
}

// listTenants is list over several tenants, in the order given, starting
// at p.After.Tenant: one page of p.Limit records that may span tenants.
// next carries the tenant to go on with.
func (a *AdminService) listTenants(ctx context.Context, p *store.ListParams, t *Tenant, tenants []string) (page []*store.Record, next *store.RecordID, err error) {
	want := p.Limit
	for i, name := range tenants {
		if name < p.After.Tenant {
			continue
		}
		q := *p
		q.Tenant, q.Limit = name, want-len(page)
		if name != p.After.Tenant {
			q.After = store.RecordID{}
		}
		recs, n, err := a.list(ctx, &q, t)
		if err != nil {
			return nil, nil, err
		}
		page = append(page, recs...)
		if n != nil {
			n.Tenant = name
			return page, n, nil
		}
		if len(page) == want {
			if i+1 < len(tenants) {
				return page, &store.RecordID{Tenant: tenants[i+1]}, nil
			}
			return page, nil, nil
		}
	}
	return page, nil, nil
}

// adminRecordToProto is recordToProto with the record's tenant, which an
// operator's answers need to tell records apart.
func adminRecordToProto(r *store.Record) *idemv1.Record {
	pb := recordToProto(r)
	pb.Tenant = r.Tenant
	return pb
}

// durationText prints a Duration for a message, also one too long for a
// time.Duration.
func durationText(d *durationpb.Duration) string {
	if d.CheckValid() == nil && d.GetSeconds() > -1<<33 && d.GetSeconds() < 1<<33 { // ±272 years
		return d.AsDuration().String()
	}
	if d.GetNanos() == 0 {
		return fmt.Sprintf("%ds", d.GetSeconds())
	}
	return fmt.Sprintf("%ds and %dns", d.GetSeconds(), d.GetNanos())
}

// A page token is the last (namespace, key) of the page; with all_tenants,
// the (tenant, namespace, key) to go on after, where the namespace and key
// are empty to start at the tenant's first record. Neither a tenant nor a
// namespace contains a NUL byte, so it separates them.
func encodePageToken(id store.RecordID, allTenants bool) string {
	s := id.Namespace + "\x00" + id.Key
	if allTenants {
		s = id.Tenant + "\x00" + s
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func decodePageToken(tok string, allTenants bool) (store.RecordID, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return store.RecordID{}, false
	}
	s := string(raw)
	var id store.RecordID
	if allTenants {
		var ok bool
		if id.Tenant, s, ok = strings.Cut(s, "\x00"); !ok || config.CheckTenantName(id.Tenant) != nil {
			return store.RecordID{}, false
		}
	}
	ns, key, ok := strings.Cut(s, "\x00")
	if !ok {
		return store.RecordID{}, false
	}
	if allTenants && ns == "" && key == "" {
		return id, true
	}
	if validateID(ns, key) != nil {
		return store.RecordID{}, false
	}
	id.Namespace, id.Key = ns, key
	return id, true
}

// DeleteRecord implements idem.v1.AdminService.
func (a *AdminService) DeleteRecord(ctx context.Context, req *idemv1.DeleteRecordRequest) (*idemv1.DeleteRecordResponse, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	tenant, err := a.targetTenant(ctx, "DeleteRecord", req.GetTenant())
	if err != nil {
		return nil, err
	}
	if err := validateID(req.GetNamespace(), req.GetKey()); err != nil {
		return nil, err
	}
	if err := validateReason(req.GetReason()); err != nil {
		return nil, err
	}
	if err := a.checkNamespace(ctx, req.GetNamespace()); err != nil {
		return nil, err
	}
	p := &store.DeleteParams{RecordID: store.RecordID{Tenant: tenant, Namespace: req.GetNamespace(), Key: req.GetKey()},
		Actor: actorOf(ctx, ""), Reason: req.GetReason()}
	rec, err := a.store.RecordDelete(ctx, p)
	if err != nil {
		return nil, rewriteError(ctx, a.logger, err)
	}
	// Keys and tokens are never logged (docs/security.md): the line says
	// who deleted a record of which namespace in which state, the attempt,
	// which tells a retried job from a fresh one, and why; the key's
	// timeline keeps which record it was.
	a.logger.InfoContext(ctx, "record deleted by an operator", "tenant", rec.Tenant, "namespace", rec.Namespace,
		"state", rec.State, "attempt", rec.Attempt, "who", who(p.Actor), "by_tenant", p.Actor.Tenant, "reason", p.Reason)
	return &idemv1.DeleteRecordResponse{Record: adminRecordToProto(rec)}, nil
}

// GetRecord implements idem.v1.AdminService.
func (a *AdminService) GetRecord(ctx context.Context, req *idemv1.GetRecordRequest) (*idemv1.GetRecordResponse, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	tenant, err := a.targetTenant(ctx, "GetRecord", req.GetTenant())
	if err != nil {
		return nil, err
	}
	if err := validateID(req.GetNamespace(), req.GetKey()); err != nil {
		return nil, err
	}
	if err := a.checkNamespace(ctx, req.GetNamespace()); err != nil {
		return nil, err
	}
	id := store.RecordID{Tenant: tenant, Namespace: req.GetNamespace(), Key: req.GetKey()}
	resp := &idemv1.GetRecordResponse{}
	rec, err := a.store.RecordGet(ctx, id)
	switch {
	case err == nil:
		resp.Record = adminRecordToProto(rec)
	case !errors.Is(err, store.ErrNotFound) || !req.GetIncludeHistory():
		return nil, rewriteError(ctx, a.logger, err)
	}
	if req.GetIncludeHistory() {
		if resp.History, err = history(ctx, a.store, id); err != nil {
			return nil, rewriteError(ctx, a.logger, err)
		}
		if resp.Record == nil && len(resp.History) == 0 {
			return nil, rewriteError(ctx, a.logger, store.ErrNotFound)
		}
	}
	return resp, nil
}

// ResolveRecord implements idem.v1.AdminService.
func (a *AdminService) ResolveRecord(ctx context.Context, req *idemv1.ResolveRecordRequest) (*idemv1.ResolveRecordResponse, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	tenant, err := a.targetTenant(ctx, "ResolveRecord", req.GetTenant())
	if err != nil {
		return nil, err
	}
	if err := validateID(req.GetNamespace(), req.GetKey()); err != nil {
		return nil, err
	}
	if req.GetToken() < 0 {
		return nil, invalid("token", idemv1.ErrorReason_ERROR_REASON_INVALID_TOKEN, "token is %d; pass the token the record is held with, or 0 for any", req.GetToken())
	}
	if err := validateReason(req.GetReason()); err != nil {
		return nil, err
	}
	p := &store.ResolveParams{RecordID: store.RecordID{Tenant: tenant, Namespace: req.GetNamespace(), Key: req.GetKey()},
		Token: req.GetToken(), Actor: actorOf(ctx, ""), Reason: req.GetReason()}
	// The record's own tenant's limit: its Claims replay the result.
	if err := resolution(p, req.GetCompleted(), req.GetFailed(), req.GetReleased(), a.tenants.lookup(tenant), a.maxResultBytes); err != nil {
		return nil, err
	}
	if err := a.checkNamespace(ctx, req.GetNamespace()); err != nil {
		return nil, err
	}
	rec, err := a.store.RecordResolve(ctx, p)
	if err != nil {
		return nil, rewriteError(ctx, a.logger, err)
	}
	auditResolution(ctx, a.logger, rec, p)
	return &idemv1.ResolveRecordResponse{Record: adminRecordToProto(rec)}, nil
}

// resolution sets p's resolution from a request's: the one of completed,
// failed and released that is set, checked (the result against tenant t's
// limit, or the server's, limit).
func resolution(p *store.ResolveParams, completed *idemv1.ResolveCompleted, failed *idemv1.ResolveFailed, released *idemv1.ResolveReleased,
	t *Tenant, limit int) error {
	switch {
	case completed != nil:
		if err := checkResultLimit(t, len(completed.GetResult()), limit); err != nil {
			return err
		}
		p.Resolution, p.Result = store.ResolveCompleted, completed.GetResult()
	case failed != nil:
		if err := validateErrorText(failed.GetError()); err != nil {
			return err
		}
		p.Resolution, p.Error = store.ResolveFailed, failed.GetError()
	case released != nil:
		p.Resolution = store.ResolveReleased
	default:
		return invalid("resolution", idemv1.ErrorReason_ERROR_REASON_INVALID_RESOLUTION,
			"no resolution; set one of completed (with a result), failed (with an error) or released")
	}
	return nil
}

// Stats implements idem.v1.AdminService.
func (a *AdminService) Stats(ctx context.Context, req *idemv1.StatsRequest) (*idemv1.StatsResponse, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	tenants, err := a.targetTenants(ctx, "Stats", req.GetTenant(), req.GetAllTenants())
	if err != nil {
		return nil, err
	}
	var t *Tenant
	if ns := req.GetNamespace(); ns != "" {
		if err := validateNamespace(ns); err != nil {
			return nil, err
		}
		if err := a.checkNamespace(ctx, ns); err != nil {
			return nil, err
		}
	} else {
		t = a.allowList(ctx)
	}
	resp := &idemv1.StatsResponse{CallerName: OperatorFromContext(ctx)}
	for _, tenant := range tenants {
		rows, err := a.store.RecordStats(ctx, &store.StatsParams{Tenant: tenant, Namespace: req.GetNamespace()})
		if err != nil {
			return nil, rewriteError(ctx, a.logger, err)
		}
		for _, r := range rows {
			if t != nil && !t.allows(r.Namespace) {
				continue
			}
			resp.Rows = append(resp.Rows, &idemv1.StatsRow{Tenant: tenant, Namespace: r.Namespace, State: stateToProto[r.State], Count: r.Count,
				OldestUpdatedAt: timestamppb.New(r.OldestUpdatedAt)})
		}
	}
	return resp, nil
}
