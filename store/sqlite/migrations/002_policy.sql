-- The name of the config file's policy that applied when the record was
-- last acquired (its namespace globs joined by commas); '' for none.
ALTER TABLE idem_records ADD COLUMN policy TEXT NOT NULL DEFAULT '';
