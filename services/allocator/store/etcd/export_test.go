package etcd

import "time"

// SetRequestRetention sets how long s keeps request records, for tests
// that cannot wait store.DefaultRequestRetention. Call it before s commits.
func SetRequestRetention(s *Store, d time.Duration) { s.requests.retention = d }
