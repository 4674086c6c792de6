package sqlite

// BatchStats returns how many batches s's writer committed and how many calls
// they held, for the tests of package sqlite_test.
func BatchStats(s *Store) (batches, calls int64) { return s.w.stats() }

// stats returns how many batches w committed and their calls.
func (w *writer) stats() (batches, calls int64) {
	b, c, _ := w.counts()
	return b, c
}

// statementsRun returns how many prepared statements w's batches ran.
func (w *writer) statementsRun() int64 {
	_, _, n := w.counts()
	return n
}
