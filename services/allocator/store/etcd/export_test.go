package etcd

import "time"

// SetRequestRetention sets how long s keeps request records, for tests
// that cannot wait store.DefaultRequestRetention. Call it before s commits.
func SetRequestRetention(s *Store, d time.Duration) { s.requests.retention = d }

// SetPage sets how many keys a read of a snapshot returns at most, and
// observe, when set, is told of every such read's range.
func SetPage(s *Store, n int, observe func(from, end string, rev int64)) {
	s.pageSize, s.observeRead = n, observe
}

// TrustsMarks reports whether s compares pools-changed alone for
// CondPoolsUnchangedSince, and whether it has decided yet.
func TrustsMarks(s *Store) (trusted, decided bool) {
	st := s.marks.state.Load()
	return st == marksTrusted, st != marksUnknown
}

// MarkChecksIdle reports whether no check of a pool change for
// pools-changed is waiting or running.
func MarkChecksIdle(s *Store) bool {
	s.marks.mu.Lock()
	defer s.marks.mu.Unlock()
	return !s.marks.running && len(s.marks.queue) == 0
}
