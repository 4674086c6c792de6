-- The state 'unresolved' and the column hold: true when the policy that
-- applied to the record's Claim holds it for resolution, so that a lease
-- that runs out without Complete or Fail makes it 'unresolved' (by the
-- sweeper, or by the Claim that finds it first) instead of open to a
-- takeover. SQLite cannot change a CHECK constraint in place, so the table
-- is built again with both and the rows copied over, in the migration's
-- transaction.
CREATE TABLE idem_records_new (
    tenant           TEXT    NOT NULL,
    namespace        TEXT    NOT NULL,
    key              TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('processing', 'completed', 'failed', 'released', 'expired', 'unresolved')),
    token            INTEGER NOT NULL,
    attempt          INTEGER NOT NULL,
    claimant         TEXT    NOT NULL DEFAULT '',
    fingerprint      BLOB    NOT NULL DEFAULT x'',
    lease_expires_at INTEGER,
    retention_us     INTEGER NOT NULL,
    result           BLOB,
    error            TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    completed_at     INTEGER,
    expires_at       INTEGER,
    policy           TEXT    NOT NULL DEFAULT '',
    hold             INTEGER NOT NULL DEFAULT 0 CHECK (hold IN (0, 1)),
    PRIMARY KEY (tenant, namespace, key)
) STRICT;

INSERT INTO idem_records_new (tenant, namespace, key, state, token, attempt, claimant, fingerprint,
    lease_expires_at, retention_us, result, error, created_at, updated_at, completed_at, expires_at, policy)
SELECT tenant, namespace, key, state, token, attempt, claimant, fingerprint,
    lease_expires_at, retention_us, result, error, created_at, updated_at, completed_at, expires_at, policy
FROM idem_records;

DROP TABLE idem_records;
ALTER TABLE idem_records_new RENAME TO idem_records;

CREATE INDEX idem_records_lease_due ON idem_records (lease_expires_at)
    WHERE state = 'processing';

CREATE INDEX idem_records_purge_due ON idem_records (expires_at)
    WHERE state <> 'processing';
