package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

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

// AdminService implements idem.v1.AdminService over the caller's tenant.
type AdminService struct {
	idemv1.UnimplementedAdminServiceServer

	store  store.Store
	logger *slog.Logger
	// Authorize, when set, is asked before every call and its error is
	// returned as is. With tenants configured it admits only admin tenants;
	// without them (single-tenant mode) it is nil and every caller is admitted.
	Authorize func(ctx context.Context) error
	// Tenants, when set, holds every call to the namespace allow-list of the
	// caller's tenant, as the IdempotencyService does: a namespace outside
	// it is PERMISSION_DENIED / NAMESPACE_NOT_ALLOWED, and a listing or a
	// count without a namespace shows only the namespaces it admits. Nil
	// (single-tenant mode) admits every namespace.
	Tenants *Tenants
}

var _ idemv1.AdminServiceServer = (*AdminService)(nil)

// NewAdminService returns the admin service over st.
func NewAdminService(st store.Store, logger *slog.Logger) *AdminService {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &AdminService{store: st, logger: logger}
}

func (a *AdminService) authorize(ctx context.Context) error {
	if a.Authorize == nil {
		return nil
	}
	return a.Authorize(ctx)
}

// allowList returns the caller's tenant when it has a namespace allow-list,
// nil when every namespace is open to it.
func (a *AdminService) allowList(ctx context.Context) *tenant {
	t := a.Tenants.callerTenant(ctx)
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
}

// ListRecords implements idem.v1.AdminService.
func (a *AdminService) ListRecords(ctx context.Context, req *idemv1.ListRecordsRequest) (*idemv1.ListRecordsResponse, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	p := &store.ListParams{Tenant: TenantFromContext(ctx), Namespace: req.GetNamespace(), Limit: DefaultPageSize}
	if p.Namespace != "" {
		if err := validateNamespace(p.Namespace); err != nil {
			return nil, err
		}
		if err := a.checkNamespace(ctx, p.Namespace); err != nil {
			return nil, err
		}
	}
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
		after, ok := decodePageToken(tok)
		if !ok {
			return nil, invalid("page_token", idemv1.ErrorReason_ERROR_REASON_INVALID_PAGE_TOKEN, "page_token is not one this server returned; start again with an empty page_token")
		}
		p.After = after
	}
	var t *tenant
	if p.Namespace == "" {
		t = a.allowList(ctx)
	}
	recs, next, err := a.list(ctx, p, t)
	if err != nil {
		return nil, rewriteError(ctx, a.logger, err)
	}
	resp := &idemv1.ListRecordsResponse{}
	if next != nil {
		resp.NextPageToken = encodePageToken(*next)
	}
	resp.Records = make([]*idemv1.Record, len(recs))
	for i, r := range recs {
		resp.Records[i] = recordToProto(r)
	}
	return resp, nil
}

// list reads one page of p.Limit records. With t (a tenant with an
// allow-list, listing every namespace) it skips the records of namespaces t
// may not see, reading further until the page is full; after maxListScan
// records it stops with a shorter page, possibly empty, and a next page.
// next is where the next page starts, nil when this page is the last.
func (a *AdminService) list(ctx context.Context, p *store.ListParams, t *tenant) (page []*store.Record, next *store.RecordID, err error) {
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

// A page token is the last (namespace, key) of the page. A namespace never
// contains a NUL byte, so it separates the two.
func encodePageToken(id store.RecordID) string {
	return base64.RawURLEncoding.EncodeToString([]byte(id.Namespace + "\x00" + id.Key))
}

func decodePageToken(tok string) (store.RecordID, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return store.RecordID{}, false
	}
	ns, key, ok := strings.Cut(string(raw), "\x00")
	if !ok || validateID(ns, key) != nil {
		return store.RecordID{}, false
	}
	return store.RecordID{Namespace: ns, Key: key}, true
}

// DeleteRecord implements idem.v1.AdminService.
func (a *AdminService) DeleteRecord(ctx context.Context, req *idemv1.DeleteRecordRequest) (*idemv1.DeleteRecordResponse, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	if err := validateID(req.GetNamespace(), req.GetKey()); err != nil {
		return nil, err
	}
	if err := a.checkNamespace(ctx, req.GetNamespace()); err != nil {
		return nil, err
	}
	id := store.RecordID{Tenant: TenantFromContext(ctx), Namespace: req.GetNamespace(), Key: req.GetKey()}
	rec, err := a.store.RecordDelete(ctx, id)
	if err != nil {
		return nil, rewriteError(ctx, a.logger, err)
	}
	// Keys and tokens are never logged (README, Security): the line says
	// who deleted a record of which namespace in which state, and the
	// attempt, which tells a retried job from a fresh one.
	a.logger.InfoContext(ctx, "record deleted by an operator", "tenant", id.Tenant, "namespace", id.Namespace,
		"state", rec.State, "attempt", rec.Attempt)
	return &idemv1.DeleteRecordResponse{Record: recordToProto(rec)}, nil
}

// Stats implements idem.v1.AdminService.
func (a *AdminService) Stats(ctx context.Context, req *idemv1.StatsRequest) (*idemv1.StatsResponse, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	var t *tenant
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
	rows, err := a.store.RecordStats(ctx, &store.StatsParams{Tenant: TenantFromContext(ctx), Namespace: req.GetNamespace()})
	if err != nil {
		return nil, rewriteError(ctx, a.logger, err)
	}
	resp := &idemv1.StatsResponse{Rows: make([]*idemv1.StatsRow, 0, len(rows))}
	for _, r := range rows {
		if t != nil && !t.allows(r.Namespace) {
			continue
		}
		resp.Rows = append(resp.Rows, &idemv1.StatsRow{Namespace: r.Namespace, State: stateToProto[r.State], Count: r.Count})
	}
	return resp, nil
}
