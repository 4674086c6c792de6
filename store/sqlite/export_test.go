package sqlite

// BatchStats returns how many batches s's writer committed and how many calls
// they held, for the tests of package sqlite_test.
func BatchStats(s *Store) (batches, calls int64) { return s.w.stats() }
