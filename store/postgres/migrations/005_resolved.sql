-- resolved_token is the token the record held when an operator resolved it
-- (AdminService.ResolveRecord); NULL when none did. The record stands as the
-- operator left it while its token is still that one: a token call of the
-- holder with another value is then told that an operator resolved the
-- record, not that the holder's own call ended it. A takeover draws a new
-- token, so it needs no reset. No default: no table rewrite.
ALTER TABLE idem_records ADD COLUMN resolved_token bigint;
