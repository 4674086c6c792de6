-- idem's schema on SQLite. Times are integer microseconds since the Unix
-- epoch (UTC) and durations integer microseconds. The tables are STRICT, so a
-- value of the wrong type is an error rather than a silent conversion.

-- Tokens are drawn from this one-row counter, never from attempt, so that a
-- record purged and created again still gets tokens greater than every
-- earlier one. The counter is bumped inside the write transaction that hands
-- the token out.
CREATE TABLE idem_token (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
) STRICT;

INSERT INTO idem_token (id, value) VALUES (1, 0);

-- A rowid table, not WITHOUT ROWID: results reach 64 KiB, far past the small
-- rows WITHOUT ROWID suits. The primary key is the atomic gate all the same.
CREATE TABLE idem_records (
    tenant           TEXT    NOT NULL,
    namespace        TEXT    NOT NULL,
    key              TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('processing', 'completed', 'failed', 'released', 'expired')),
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
    PRIMARY KEY (tenant, namespace, key)
) STRICT;

-- The sweeper's first statement: PROCESSING records whose lease ran out.
CREATE INDEX idem_records_lease_due ON idem_records (lease_expires_at)
    WHERE state = 'processing';

-- The sweeper's second statement: records past their retention.
CREATE INDEX idem_records_purge_due ON idem_records (expires_at)
    WHERE state <> 'processing';
