package services

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/store"
)

// MaxHeldNamespaces bounds the namespaces a WatchHeld or ListHeld request
// names.
const MaxHeldNamespaces = 100

// ResolverService implements idem.v1.ResolverService over the caller's
// tenant: any of its tokens may watch, list and resolve its held records in
// the namespaces its allow-list admits (docs/security.md says why).
type ResolverService struct {
	idemv1.UnimplementedResolverServiceServer

	store  store.Store
	logger *slog.Logger
	// tenants, when set, are idemd's tenants, as for the Service; nil serves
	// DefaultTenant.
	tenants        *Tenants
	maxResultBytes int
	relist         time.Duration
	// ended is closed by EndStreams, which ends every stream.
	ended   chan struct{}
	endOnce sync.Once
}

var _ idemv1.ResolverServiceServer = (*ResolverService)(nil)

// NewResolverService returns the resolver service over st, for the tenants
// and limits of cfg (its zero fields are the defaults, as for NewService).
func NewResolverService(st store.Store, cfg Config, logger *slog.Logger) *ResolverService {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.WithDefaults()
	return &ResolverService{store: st, logger: logger, tenants: cfg.Tenants, maxResultBytes: cfg.MaxResultBytes,
		relist: cfg.HeldRelist, ended: make(chan struct{})}
}

// EndStreams ends every WatchHeld stream, now and from now on, with
// UNAVAILABLE: a server that drains does not wait for streams that never
// end by themselves, and their clients connect again, to another replica.
func (r *ResolverService) EndStreams() {
	r.endOnce.Do(func() { close(r.ended) })
}

// heldFilter is which held records of a tenant a request asks for.
type heldFilter struct {
	tenant     string
	namespaces map[string]bool // nil for every one the allow-list admits
	allowList  *Tenant         // nil when every namespace is open to the caller
}

// keeps reports whether the filter keeps records of namespace.
func (f *heldFilter) keeps(namespace string) bool {
	if f.namespaces != nil && !f.namespaces[namespace] {
		return false
	}
	return f.allowList == nil || f.allowList.allows(namespace)
}

// filter is the heldFilter of a request naming namespaces: each valid and
// admitted by the caller's allow-list.
func (r *ResolverService) filter(ctx context.Context, namespaces []string) (*heldFilter, error) {
	t, err := r.tenants.caller(ctx)
	if err != nil {
		return nil, err
	}
	f := &heldFilter{tenant: TenantFromContext(ctx)}
	if t != nil && t.namespaces != nil {
		f.allowList = t
	}
	if len(namespaces) > MaxHeldNamespaces {
		return nil, invalid("namespaces", idemv1.ErrorReason_ERROR_REASON_INVALID_NAMESPACE,
			"namespaces names %d; at most %d, or none for every namespace the tenant may use", len(namespaces), MaxHeldNamespaces)
	}
	if len(namespaces) > 0 {
		f.namespaces = make(map[string]bool, len(namespaces))
	}
	for _, ns := range namespaces {
		if err := validateNamespace(ns); err != nil {
			return nil, err
		}
		if t != nil && !t.allows(ns) {
			return nil, namespaceNotAllowed(t.name, ns)
		}
		f.namespaces[ns] = true
	}
	return f, nil
}

// listHeld reads one page of at most limit held records that f keeps,
// after after, reading no more than maxListScan records; next is where the
// next page starts, nil when this one is the last.
func (r *ResolverService) listHeld(ctx context.Context, f *heldFilter, after store.RecordID, limit int) (page []*store.Record, next *store.RecordID, err error) {
	q := &store.ListHeldParams{Tenant: f.tenant, After: after, Limit: limit + 1}
	scanned := 0
	for {
		recs, err := r.store.RecordListHeld(ctx, q)
		if err != nil {
			return nil, nil, err
		}
		for _, rec := range recs {
			scanned++
			if !f.keeps(rec.Namespace) {
				continue
			}
			if len(page) == limit {
				last := page[limit-1].RecordID
				return page, &last, nil
			}
			page = append(page, rec)
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

// ListHeld implements idem.v1.ResolverService.
func (r *ResolverService) ListHeld(ctx context.Context, req *idemv1.ListHeldRequest) (*idemv1.ListHeldResponse, error) {
	f, err := r.filter(ctx, req.GetNamespaces())
	if err != nil {
		return nil, err
	}
	limit := DefaultPageSize
	if n := req.GetPageSize(); n != 0 {
		if n < 1 || n > MaxPageSize {
			return nil, invalid("page_size", idemv1.ErrorReason_ERROR_REASON_INVALID_PAGE_SIZE, "page_size is %d; it must be between 1 and %d", n, MaxPageSize)
		}
		limit = int(n)
	}
	var after store.RecordID
	if tok := req.GetPageToken(); tok != "" {
		var ok bool
		if after, ok = decodePageToken(tok, false); !ok {
			return nil, invalid("page_token", idemv1.ErrorReason_ERROR_REASON_INVALID_PAGE_TOKEN, "page_token is not one this server returned; start again with an empty page_token")
		}
	}
	page, next, err := r.listHeld(ctx, f, after, limit)
	if err != nil {
		return nil, rewriteError(ctx, r.logger, err)
	}
	resp := &idemv1.ListHeldResponse{Records: make([]*idemv1.Record, len(page))}
	for i, rec := range page {
		resp.Records[i] = recordToProto(rec)
	}
	if next != nil {
		resp.NextPageToken = encodePageToken(*next, false)
	}
	return resp, nil
}

// WatchHeld implements idem.v1.ResolverService: it watches the tenant's
// held records (store.Timeline.RecordWatchHeld) before it lists them, so
// that a record held while it lists wakes it, and lists them all again at
// every wake, and every relist, telling the client what changed.
func (r *ResolverService) WatchHeld(req *idemv1.WatchHeldRequest, stream grpc.ServerStreamingServer[idemv1.WatchHeldResponse]) error {
	ctx := stream.Context()
	f, err := r.filter(ctx, req.GetNamespaces())
	if err != nil {
		return err
	}
	w := r.store.RecordWatchHeld(f.tenant)
	defer w.Close()
	tick := time.NewTicker(r.relist)
	defer tick.Stop()
	sent := map[recordKey]int64{} // the token each held record was sent with
	for synced := false; ; synced = true {
		now, err := r.allHeld(ctx, f)
		if err != nil {
			return rewriteError(ctx, r.logger, err)
		}
		for _, rec := range now {
			k := recordKey{rec.Namespace, rec.Key}
			if sent[k] == rec.Token {
				continue
			}
			if err := stream.Send(&idemv1.WatchHeldResponse{Event: &idemv1.WatchHeldResponse_Held{Held: recordToProto(rec)}}); err != nil {
				return err
			}
		}
		held := make(map[recordKey]int64, len(now))
		for _, rec := range now {
			held[recordKey{rec.Namespace, rec.Key}] = rec.Token
		}
		for k, token := range sent {
			if held[k] == 0 {
				left := &idemv1.HeldRecordLeft{Namespace: k.namespace, Key: k.key, Token: token}
				if err := stream.Send(&idemv1.WatchHeldResponse{Event: &idemv1.WatchHeldResponse_Left{Left: left}}); err != nil {
					return err
				}
			}
		}
		sent = held
		if !synced {
			if err := stream.Send(&idemv1.WatchHeldResponse{Event: &idemv1.WatchHeldResponse_Synced{Synced: true}}); err != nil {
				return err
			}
		}
		select {
		case <-w.C:
		case <-tick.C:
		case <-ctx.Done():
			return rewriteError(ctx, r.logger, ctx.Err())
		case <-r.ended:
			return NewError(codes.Unavailable, idemv1.ErrorReason_ERROR_REASON_STORE_UNAVAILABLE,
				"idemd is shutting down; open the stream again (to another replica) and it sends the held records anew", nil)
		}
	}
}

// allHeld reads every held record f keeps, page after page.
func (r *ResolverService) allHeld(ctx context.Context, f *heldFilter) ([]*store.Record, error) {
	var all []*store.Record
	var after store.RecordID
	for {
		page, next, err := r.listHeld(ctx, f, after, MaxPageSize)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == nil {
			return all, nil
		}
		after = *next
	}
}

// Resolve implements idem.v1.ResolverService.
func (r *ResolverService) Resolve(ctx context.Context, req *idemv1.ResolveRequest) (*idemv1.ResolveResponse, error) {
	if err := validateID(req.GetNamespace(), req.GetKey()); err != nil {
		return nil, err
	}
	if err := validateToken(req.GetToken()); err != nil {
		return nil, err
	}
	if err := validateResolver(req.GetResolver()); err != nil {
		return nil, err
	}
	if err := validateReason(req.GetReason()); err != nil {
		return nil, err
	}
	t, err := r.tenants.authorize(ctx, req.GetNamespace())
	if err != nil {
		return nil, err
	}
	p := &store.ResolveParams{RecordID: store.RecordID{Tenant: TenantFromContext(ctx), Namespace: req.GetNamespace(), Key: req.GetKey()},
		Token: req.GetToken(), Actor: actorOf(ctx, req.GetResolver()), Reason: req.GetReason()}
	if err := resolution(p, req.GetCompleted(), req.GetFailed(), req.GetReleased(), t, r.maxResultBytes); err != nil {
		return nil, err
	}
	rec, err := r.store.RecordResolve(ctx, p)
	if err != nil {
		return nil, rewriteError(ctx, r.logger, err)
	}
	auditResolution(ctx, r.logger, rec, p)
	return &idemv1.ResolveResponse{Record: recordToProto(rec)}, nil
}
