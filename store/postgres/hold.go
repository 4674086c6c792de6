package postgres

import (
	"context"

	"github.com/idemhq/idem/store"
)

// resolveSQL moves an UNRESOLVED record on, keeping its token, and notes
// that token as the one an operator resolved: $4 is the new state
// ('completed', 'failed' or 'released'), $5 the result (NULL unless
// completed), $6 the error, kept only when failed. When
// nothing changed, the second branch reports the row so that the caller
// learns why in the same round trip.
var resolveSQL = `
WITH changed AS (
	UPDATE idem_records SET state = $4::text, result = $5::bytea, error = CASE WHEN $4::text = 'failed' THEN $6::text END, resolved_token = token,
		lease_expires_at = NULL, completed_at = CASE WHEN $4::text = 'released' THEN NULL ELSE now() END,
		expires_at = now() + retention, updated_at = now()
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND state = 'unresolved'
	RETURNING ` + recordCols + wakeCol("idem_records", true) + `
)
SELECT true, ` + recordNames + ` FROM changed
UNION ALL
SELECT false, ` + recordCols + ` FROM idem_records
	WHERE tenant = $1 AND namespace = $2 AND key = $3 AND NOT EXISTS (SELECT 1 FROM changed)`

// resolvedRow is what resolveSQL did: changed rec, or found it so that the
// resolution does not apply.
type resolvedRow struct {
	changed bool
	rec     *store.Record
}

// resolve runs resolveSQL for p, writing target.
func (d driver) resolve(ctx context.Context, p *store.ResolveParams, target store.ResolveTarget) (resolvedRow, error) {
	var row resolvedRow
	var err error
	row.rec, err = scanRecord(d.q.QueryRow(ctx, resolveSQL, p.Tenant, p.Namespace, p.Key,
		string(target.State), target.Result, target.Error), &row.changed)
	return row, interpretError(err)
}

// RecordResolve implements store.Store. It runs the resolution until its
// statement settles it, at most maxStatementTries times.
func (s *Store) RecordResolve(ctx context.Context, p *store.ResolveParams) (*store.Record, error) {
	if err := p.CheckText(); err != nil {
		return nil, err
	}
	target, err := p.Target()
	if err != nil {
		return nil, err
	}
	return detached(ctx, s, func(ctx context.Context, d driver) (*store.Record, error) {
		for try := 0; try < maxStatementTries; try++ {
			row, err := d.resolve(ctx, p, target)
			if err != nil {
				return nil, err
			}
			if row.changed {
				return row.rec, nil
			}
			switch dec := p.Decide(row.rec); dec.Action {
			case store.ChangeRepeat:
				return row.rec, nil
			case store.ChangeRefuse:
				return nil, dec.Err
			}
			// ChangeApplies: the UPDATE waited for a concurrent change of
			// the row (a retry of this Resolve, another operator's) and
			// found it no longer UNRESOLVED, while the second branch read
			// the statement's snapshot from before that change. A new
			// statement sees it.
		}
		return nil, store.ErrContention
	})
}
