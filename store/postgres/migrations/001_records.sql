-- Tokens are drawn from one sequence, never from attempt, so that a record
-- purged and created again still gets tokens greater than every earlier one.
CREATE SEQUENCE idem_token_seq AS bigint;

CREATE TABLE idem_records (
    tenant           text        NOT NULL,
    namespace        text        NOT NULL,
    key              text        NOT NULL,
    state            text        NOT NULL CHECK (state IN ('processing', 'completed', 'failed', 'released', 'expired')),
    token            bigint      NOT NULL,
    attempt          integer     NOT NULL,
    claimant         text        NOT NULL DEFAULT '',
    fingerprint      bytea       NOT NULL DEFAULT '',
    lease_expires_at timestamptz,
    retention        interval    NOT NULL,
    result           bytea,
    error            text,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    completed_at     timestamptz,
    expires_at       timestamptz,
    PRIMARY KEY (tenant, namespace, key)
);

-- The sweeper's first query: PROCESSING records whose lease ran out.
CREATE INDEX idem_records_lease_due ON idem_records (lease_expires_at)
    WHERE state = 'processing';

-- The sweeper's second query: records past their retention.
CREATE INDEX idem_records_purge_due ON idem_records (expires_at)
    WHERE state <> 'processing';
