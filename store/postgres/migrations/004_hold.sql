-- hold is true when the policy that applied to the record's Claim holds it
-- for resolution: a lease that runs out without Complete or Fail makes it
-- 'unresolved' (by the sweeper, or by the Claim that finds it first) instead
-- of open to a takeover. A constant default: no table rewrite.
ALTER TABLE idem_records ADD COLUMN hold boolean NOT NULL DEFAULT false;

-- The new state. NOT VALID: the constraint binds every row written from now
-- on without reading the table under the migration's exclusive lock, which
-- on a large table would stop every Claim for the length of the scan. The
-- rows already there met the old, narrower constraint, so they meet this
-- one.
ALTER TABLE idem_records DROP CONSTRAINT idem_records_state_check;
ALTER TABLE idem_records ADD CONSTRAINT idem_records_state_check
    CHECK (state IN ('processing', 'completed', 'failed', 'released', 'expired', 'unresolved')) NOT VALID;
