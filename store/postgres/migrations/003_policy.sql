-- The name of the config file's policy that applied when the record was
-- last acquired (its namespace globs joined by commas); '' for none. Adding
-- a column with a constant default rewrites no rows.
ALTER TABLE idem_records ADD COLUMN policy text NOT NULL DEFAULT '';
