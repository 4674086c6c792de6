-- waiters is set by a Claim that waits for the record's lease to end
-- (ClaimRequest.wait), on the row whose lease it waits on. The statements
-- that end a lease (Complete, Fail, the sweeper's expiry) send a
-- notification on the channel idem_records for the rows that have it set,
-- in their own transaction, so that waiting Claims on every replica wake at
-- its commit; rows without it cost them nothing. A Claim that takes the
-- record over clears it: its waiters mark the new lease again.
--
-- A constant default: the column is added without rewriting the table.
ALTER TABLE idem_records ADD COLUMN waiters boolean NOT NULL DEFAULT false;
