package reconcile

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/importer/exports"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// TestChangesKeepOldestObservationAndLinks: what a service's next
// reconcile accounts for is, per cluster, its oldest unwritten change, and
// a bounded number of trace links; a failed reconcile gives it back, and a
// term's end forgets it.
func TestChangesKeepOldestObservationAndLinks(t *testing.T) {
	var c changes
	key := exports.Key{Namespace: "shop", Name: "cart"}
	tc := func(i int) map[string]string { return map[string]string{"traceparent": string(rune('a' + i))} }
	note := func(cluster string, at time.Duration, link map[string]string) {
		c.note(exports.Change{Key: key, Cluster: cluster, Observed: t0.Add(at), TraceContext: link})
	}
	note("east", 2*time.Second, tc(0))
	note("east", 3*time.Second, tc(1))
	note("west", time.Second, nil)

	p := c.take(key)
	require.Equal(t, map[string]time.Time{"east": t0.Add(2 * time.Second), "west": t0.Add(time.Second)}, p.since)
	require.Equal(t, []map[string]string{tc(0), tc(1)}, p.links)
	require.Empty(t, c.take(key).since, "taken means cleared")
	require.Zero(t, c.len())

	// A failed reconcile gives it back; a change that came meanwhile is
	// merged, the older time winning, the links bounded.
	for i := 2; i < 2+maxLinks; i++ {
		note("east", 5*time.Second, tc(i))
	}
	c.restore(key, p)
	got := c.take(key)
	require.Equal(t, t0.Add(2*time.Second), got.since["east"])
	require.Equal(t, t0.Add(time.Second), got.since["west"])
	require.Len(t, got.links, maxLinks, "links are bounded")

	// Nothing to give back is no entry.
	c.restore(key, pending{})
	require.Zero(t, c.len())

	// A term's end forgets what it did not write.
	note("east", 9*time.Second, tc(9))
	require.Equal(t, 1, c.len())
	c.reset()
	require.Zero(t, c.len())
	require.Empty(t, c.take(key).since)
}
