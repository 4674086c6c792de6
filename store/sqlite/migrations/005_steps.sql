-- A job's steps (StartStep, CompleteStep): one row per step of a record,
-- ord its place in the order the steps were first recorded. result and
-- finished_at are NULL while the step is STARTED; token is the token of the
-- call that last wrote it.
CREATE TABLE idem_steps (
    tenant      TEXT    NOT NULL,
    namespace   TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    ord         INTEGER NOT NULL,
    result      BLOB,
    token       INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    PRIMARY KEY (tenant, namespace, key, name)
) STRICT;

-- On the record, NULL until its first step: how many steps it has (a read
-- of the record reads its steps only when there are some), and the latest
-- step call's policy (1 holds a record with a STARTED step for a person
-- instead of a takeover).
ALTER TABLE idem_records ADD COLUMN step_count INTEGER;
ALTER TABLE idem_records ADD COLUMN hold_unfinished INTEGER;

-- A record's steps go with it, however it goes (purge, delete).
CREATE TRIGGER idem_records_steps_gone AFTER DELETE ON idem_records
    WHEN old.step_count IS NOT NULL
BEGIN
    DELETE FROM idem_steps WHERE tenant = old.tenant AND namespace = old.namespace AND key = old.key;
END;
