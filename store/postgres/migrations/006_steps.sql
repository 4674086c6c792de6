-- A job's steps (StartStep, CompleteStep), kept in the record's own row:
-- one array per field, the i-th element of each being the i-th step, in the
-- order the steps were first recorded. A step call is then one update of
-- the row, which a takeover's compare-and-set on the row version sees, and
-- the steps go with the row when it is purged or deleted.
--   step_names     the steps' names
--   step_results   each step's result; NULL while it is STARTED
--   step_tokens    the token of the call that last wrote each step
--   step_started   when each step was started (or recorded, if never started)
--   step_finished  when each step finished; NULL while it is STARTED
--   step_bytes     the names' and results' bytes together, for the bound
--   hold_unfinished  the latest step call's policy: true holds a record
--                  with a STARTED step for a person instead of a takeover
-- Every column is NULL on a record without steps, which costs it no byte:
-- no default, so no table rewrite either.
ALTER TABLE idem_records
    ADD COLUMN step_names text[],
    ADD COLUMN step_results bytea[],
    ADD COLUMN step_tokens bigint[],
    ADD COLUMN step_started timestamptz[],
    ADD COLUMN step_finished timestamptz[],
    ADD COLUMN step_bytes integer,
    ADD COLUMN hold_unfinished boolean;
