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
