package allocation

import "time"

// SetSnapshotReuse sets how long a watch snapshot is shared, for a test,
// and returns what restores it.
func SetSnapshotReuse(d time.Duration) (restore func()) {
	old := snapshotReuse
	snapshotReuse = d
	return func() { snapshotReuse = old }
}
