-- A record's timeline: the exceptions in the life of a key (a takeover, a
-- Fail, a lease held, a resolution, a deletion, a refused fingerprint), each
-- written in the write transaction that makes it. A Claim that creates a
-- record and its holder's Complete write none.
--
-- Entries are kept under the key, not the record, so that a deletion's
-- entry outlives the record it deleted. The sweeper's purge of a record
-- deletes its key's entries in the same transaction; an entry whose key has
-- no record (a deleted one's) goes once its expires_at has passed: the
-- record's retention after the deletion. seq, the rowid, orders them.
CREATE TABLE idem_timeline (
    seq               INTEGER PRIMARY KEY,
    tenant            TEXT    NOT NULL,
    namespace         TEXT    NOT NULL,
    key               TEXT    NOT NULL,
    at                INTEGER NOT NULL,
    kind              TEXT    NOT NULL CHECK (kind IN ('taken_over', 'failed', 'released', 'held',
                                                       'resolved', 'deleted', 'fingerprint_mismatch')),
    token             INTEGER NOT NULL,
    state             TEXT    NOT NULL DEFAULT '',
    previous_token    INTEGER NOT NULL DEFAULT 0,
    previous_state    TEXT    NOT NULL DEFAULT '',
    claimant          TEXT    NOT NULL DEFAULT '',
    previous_claimant TEXT    NOT NULL DEFAULT '',
    error             TEXT    NOT NULL DEFAULT '',
    actor_tenant      TEXT    NOT NULL DEFAULT '',
    actor_operator    TEXT    NOT NULL DEFAULT '',
    actor_resolver    TEXT    NOT NULL DEFAULT '',
    reason            TEXT    NOT NULL DEFAULT '',
    fingerprint       BLOB    NOT NULL DEFAULT x'',
    expires_at        INTEGER
) STRICT;

CREATE INDEX idem_timeline_key ON idem_timeline (tenant, namespace, key);

-- The sweeper's pass over the entries of keys without a record.
CREATE INDEX idem_timeline_expiry ON idem_timeline (expires_at) WHERE expires_at IS NOT NULL;
