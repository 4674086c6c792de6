-- A record's timeline: the exceptions in the life of a key (a takeover, a
-- Fail, a lease held, a resolution, a deletion, a refused fingerprint), each
-- written by the statement that makes it. A Claim that creates a record and
-- its holder's Complete write none, so the table costs them nothing.
--
-- Entries are kept under the key, not the record, so that a deletion's
-- entry outlives the record it deleted. The sweeper's purge of a record
-- deletes its key's entries in the same statement; an entry whose key has
-- no record (a deleted one's) goes once its expires_at has passed: the
-- record's retention after it was written, or after the deletion.
CREATE TABLE idem_timeline (
    tenant            text        NOT NULL,
    namespace         text        NOT NULL,
    key               text        NOT NULL,
    -- The order of the key's entries.
    seq               bigint      GENERATED ALWAYS AS IDENTITY,
    at                timestamptz NOT NULL,
    kind              text        NOT NULL CHECK (kind IN ('taken_over', 'failed', 'released', 'held',
                                                           'resolved', 'deleted', 'fingerprint_mismatch')),
    token             bigint      NOT NULL,
    state             text        NOT NULL DEFAULT '',
    previous_token    bigint      NOT NULL DEFAULT 0,
    previous_state    text        NOT NULL DEFAULT '',
    claimant          text        NOT NULL DEFAULT '',
    previous_claimant text        NOT NULL DEFAULT '',
    error             text        NOT NULL DEFAULT '',
    actor_tenant      text        NOT NULL DEFAULT '',
    actor_operator    text        NOT NULL DEFAULT '',
    actor_resolver    text        NOT NULL DEFAULT '',
    reason            text        NOT NULL DEFAULT '',
    fingerprint       bytea       NOT NULL DEFAULT '',
    -- NULL while its key has a record: the purge of the record deletes it.
    expires_at        timestamptz,
    PRIMARY KEY (tenant, namespace, key, seq)
);

-- The sweeper's pass over the entries of keys without a record.
CREATE INDEX idem_timeline_expiry ON idem_timeline (expires_at) WHERE expires_at IS NOT NULL;
