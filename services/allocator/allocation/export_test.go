package allocation

import "time"

// SetSnapshotReuse sets how long a watch snapshot is shared, for a test,
// and returns what restores it.
func SetSnapshotReuse(d time.Duration) (restore func()) {
	old := snapshotReuse
	snapshotReuse = d
	return func() { snapshotReuse = old }
}

// WithFollowRetry sets how long the follower waits before it watches
// again after an error, for a test.
func WithFollowRetry(d time.Duration) Option { return func(s *Allocator) { s.followRetry = d } }

// WithDeleteChunk sets how many allocations a forced deletion releases
// per commit, for a test.
func WithDeleteChunk(n int) Option { return func(s *Allocator) { s.deleteChunk = n } }
