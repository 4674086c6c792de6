package services

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"unicode"

	idemv1 "github.com/idemhq/idem/gen/idem/v1"
	"github.com/idemhq/idem/limits"
	"github.com/idemhq/idem/store"
)

// Timelines, reasons and the audit: what the services read of a record's
// timeline, the free text callers give for a resolution or a deletion, and
// the log lines that record who did what.

// maxTimeline bounds the entries a read returns: the latest ones.
const maxTimeline = 1000

// validateReason checks the reason of a resolution or a deletion: any text
// (newlines included) up to limits.MaxReasonBytes.
func validateReason(reason string) error {
	if err := validateMaxBytes("reason", idemv1.ErrorReason_ERROR_REASON_INVALID_REASON, len(reason), limits.MaxReasonBytes); err != nil {
		return err
	}
	return validateText("reason", reason)
}

// validateResolver checks the name a resolver gives itself: 1 to
// limits.MaxResolverBytes of UTF-8 without control characters, since it is
// printed on log lines and in the console.
func validateResolver(name string) error {
	if name == "" {
		return invalid("resolver", idemv1.ErrorReason_ERROR_REASON_INVALID_RESOLVER,
			"resolver is empty; name the resolver (1 to %d bytes, such as \"stripe-reconciler\"), so that its decisions say who made them", limits.MaxResolverBytes)
	}
	if err := validateMaxBytes("resolver", idemv1.ErrorReason_ERROR_REASON_INVALID_RESOLVER, len(name), limits.MaxResolverBytes); err != nil {
		return err
	}
	if err := validateText("resolver", name); err != nil {
		return err
	}
	for i, r := range name {
		if unicode.IsControl(r) {
			return invalid("resolver", idemv1.ErrorReason_ERROR_REASON_INVALID_RESOLVER, "resolver has a control character at byte %d; a resolver's name is printable text", i)
		}
	}
	return nil
}

// history reads the timeline of id's key, as the API sends it.
func history(ctx context.Context, st store.Store, id store.RecordID) ([]*idemv1.TimelineEntry, error) {
	entries, err := st.RecordTimeline(ctx, &store.TimelineParams{RecordID: id, Limit: maxTimeline})
	if err != nil {
		return nil, err
	}
	out := make([]*idemv1.TimelineEntry, len(entries))
	for i, e := range entries {
		out[i] = &idemv1.TimelineEntry{
			Kind:             entryKindToProto[e.Kind],
			At:               timestamp(e.At),
			Token:            e.Token,
			State:            stateToProto[e.State],
			PreviousToken:    e.PreviousToken,
			PreviousState:    stateToProto[e.PreviousState],
			Claimant:         e.Claimant,
			PreviousClaimant: e.PreviousClaimant,
			Error:            e.Error,
			Reason:           e.Reason,
			Fingerprint:      e.Fingerprint,
		}
		if e.Actor != (store.Actor{}) {
			out[i].Actor = &idemv1.Actor{Tenant: e.Actor.Tenant, Operator: e.Actor.Operator, Resolver: e.Actor.Resolver}
		}
	}
	return out, nil
}

var entryKindToProto = map[store.EntryKind]idemv1.TimelineEntryKind{
	store.EntryTakenOver:           idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_TAKEN_OVER,
	store.EntryFailed:              idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_FAILED,
	store.EntryReleased:            idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_RELEASED,
	store.EntryHeld:                idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_HELD,
	store.EntryResolved:            idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_RESOLVED,
	store.EntryDeleted:             idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_DELETED,
	store.EntryFingerprintMismatch: idemv1.TimelineEntryKind_TIMELINE_ENTRY_KIND_FINGERPRINT_MISMATCH,
}

// who names an actor on a log line: the name its token carries, a
// resolver's name, or its tenant.
func who(a store.Actor) string {
	switch {
	case a.Resolver != "" && a.Operator != "":
		return fmt.Sprintf("resolver %s (token of %s)", a.Resolver, a.Operator)
	case a.Resolver != "":
		return "resolver " + a.Resolver
	case a.Operator != "":
		return a.Operator
	}
	return "tenant " + a.Tenant
}

// auditResolution is the audit line of a resolution: which record (its
// tenant, namespace, key and token), the decision, who made it and why.
// Unlike other lines it names the key: a resolution is rare, and an
// incident's review needs to find it.
func auditResolution(ctx context.Context, logger *slog.Logger, rec *store.Record, p *store.ResolveParams) {
	logger.InfoContext(ctx, "record resolved", "tenant", rec.Tenant, "namespace", rec.Namespace, "key", rec.Key,
		"token", rec.Token, "decision", rec.State, "who", who(p.Actor), "by_tenant", p.Actor.Tenant, "reason", p.Reason)
}

// crossTenantLog writes the line of an operator's call across tenants at
// info once per credential and target tenant (or all_tenants) in this
// process, and at debug after: a console refreshing a page makes the same
// call every few seconds.
type crossTenantLog struct {
	mu   sync.Mutex
	seen map[crossTenantKey]struct{}
}

// crossTenantKey is one credential's calls on one target.
type crossTenantKey struct {
	cred   *Credential
	caller string // the caller's tenant, for a call without a credential
	target string // a tenant, or "" for all_tenants
}

// maxCrossTenantSeen bounds what crossTenantLog remembers; past it, it
// starts again, and a few lines are written at info once more.
const maxCrossTenantSeen = 4096

// first reports whether k is new, and remembers it.
func (l *crossTenantLog) first(k crossTenantKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[k]; ok {
		return false
	}
	if l.seen == nil || len(l.seen) >= maxCrossTenantSeen {
		l.seen = map[crossTenantKey]struct{}{}
	}
	l.seen[k] = struct{}{}
	return true
}

// log writes the line of a call of method across tenants: to tenant, or
// to all of them when all.
func (l *crossTenantLog) log(ctx context.Context, logger *slog.Logger, method, tenant string, all bool) {
	k := crossTenantKey{cred: credentialFromContext(ctx), caller: TenantFromContext(ctx), target: tenant}
	level := slog.LevelDebug
	if l.first(k) {
		level = slog.LevelInfo
	}
	if !logger.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("operator", k.caller)}
	if name := OperatorFromContext(ctx); name != "" {
		attrs = append(attrs, slog.String("who", name))
	}
	if all {
		attrs = append(attrs, slog.Bool("all_tenants", true))
	} else {
		attrs = append(attrs, slog.String("tenant", tenant))
	}
	attrs = append(attrs, slog.String("method", method))
	logger.LogAttrs(ctx, level, "operator call across tenants", attrs...)
}
