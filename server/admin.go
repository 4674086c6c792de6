package server

import (
	"context"
	"encoding/base64"
	"log/slog"
	"strings"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/store"
)

// Page sizes of ListRecords.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
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
	}
	if st := req.GetState(); st != idemv1.State_STATE_UNSPECIFIED {
		s, ok := stateFromProto[st]
		if !ok {
			return nil, invalid("state", idemv1.ErrorReason_ERROR_REASON_INVALID_STATE, "state %d is not a known State", st)
		}
		p.State = s
	}
	if d := req.GetOlderThan(); d != nil {
		if err := d.CheckValid(); err != nil || d.AsDuration() < 0 {
			return nil, invalid("older_than", idemv1.ErrorReason_ERROR_REASON_INVALID_OLDER_THAN, "older_than must be a duration of 0 or more")
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
	// One more than the page tells whether another page follows.
	want := p.Limit
	p.Limit++
	recs, err := a.store.RecordList(ctx, p)
	if err != nil {
		return nil, rewriteError(ctx, a.logger, err)
	}
	resp := &idemv1.ListRecordsResponse{}
	if len(recs) > want {
		recs = recs[:want]
		last := recs[want-1]
		resp.NextPageToken = encodePageToken(last.RecordID)
	}
	resp.Records = make([]*idemv1.Record, len(recs))
	for i, r := range recs {
		resp.Records[i] = recordToProto(r)
	}
	return resp, nil
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
	id := store.RecordID{Tenant: TenantFromContext(ctx), Namespace: req.GetNamespace(), Key: req.GetKey()}
	rec, err := a.store.RecordDelete(ctx, id)
	if err != nil {
		return nil, rewriteError(ctx, a.logger, err)
	}
	a.logger.InfoContext(ctx, "record deleted by an operator", "tenant", id.Tenant, "namespace", id.Namespace,
		"key", truncate(id.Key, 32), "state", rec.State, "token", rec.Token)
	return &idemv1.DeleteRecordResponse{Record: recordToProto(rec)}, nil
}

// Stats implements idem.v1.AdminService.
func (a *AdminService) Stats(ctx context.Context, req *idemv1.StatsRequest) (*idemv1.StatsResponse, error) {
	if err := a.authorize(ctx); err != nil {
		return nil, err
	}
	if ns := req.GetNamespace(); ns != "" {
		if err := validateNamespace(ns); err != nil {
			return nil, err
		}
	}
	rows, err := a.store.RecordStats(ctx, &store.StatsParams{Tenant: TenantFromContext(ctx), Namespace: req.GetNamespace()})
	if err != nil {
		return nil, rewriteError(ctx, a.logger, err)
	}
	resp := &idemv1.StatsResponse{Rows: make([]*idemv1.StatsRow, len(rows))}
	for i, r := range rows {
		resp.Rows[i] = &idemv1.StatsRow{Namespace: r.Namespace, State: stateToProto[r.State], Count: r.Count}
	}
	return resp, nil
}
