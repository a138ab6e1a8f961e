package decide

import (
	"net/netip"
	"time"
)

// Strikes is what one pass remembers for the next: how many consecutive
// passes each leak candidate and each orphaned slice has been seen in, and
// since when each finding has been seen. The zero value is the state before
// the first pass. A pass never modifies the Strikes it was given, so a
// caller may retry a pass with the same input.
type Strikes struct {
	leaks map[AllocationKey]strike
	// orphans counts the passes each orphaned slice has been seen in, by
	// uid: a slice deleted and created again starts from zero.
	orphans map[string]int
	// deletions follows each pool being deleted, by id.
	deletions map[string]deletionWatch
	seen      map[findingKey]time.Time
}

// deletionWatch is what a pass saw of a pool being deleted: its etag, the
// allocations it held, and how many consecutive passes since have seen it
// hold no fewer (0 the first time it is seen, or when it went down).
type deletionWatch struct {
	etag      string
	remaining int
	stalls    int
}

type strike struct {
	count     int
	firstSeen time.Time
}

// findingKey identifies a finding across passes.
type findingKey struct {
	kind      Kind
	pool      string
	address   netip.Addr
	etag      string
	other     Owner
	otherPool string
	sliceUID  string
	sliceNS   string
	sliceName string
}

func keyOf(f *Finding) findingKey {
	return findingKey{kind: f.Kind, pool: f.Pool, address: f.Address, etag: f.Etag, other: f.Other, otherPool: f.OtherPool,
		sliceUID: f.Slice.UID, sliceNS: f.Slice.Namespace, sliceName: f.Slice.Name}
}

// Len returns the number of leak candidates being counted.
func (s Strikes) Len() int { return len(s.leaks) }

// Count returns the strikes of the allocation k and when it was first seen
// as a leak candidate; ok is false when it is not being counted.
func (s Strikes) Count(k AllocationKey) (count int, firstSeen time.Time, ok bool) {
	st, ok := s.leaks[k]
	return st.count, st.firstSeen, ok
}
