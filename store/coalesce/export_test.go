package coalesce

// QueuedClaims is how many Claims wait for a batch.
func (s *Store) QueuedClaims() int { return s.claims.Queued() }

// QueuedGets is how many reads wait for a batch.
func (s *Store) QueuedGets() int { return s.gets.Queued() }
