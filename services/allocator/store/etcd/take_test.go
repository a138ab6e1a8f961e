package etcd

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTakeKeepsRivalsApart: a combined transaction never holds a commit
// that writes what another of its commits compares or writes; commits that
// only compare the same key go together; a commit whose caller has gone is
// dropped; the rest keep their order for the next transaction.
func TestTakeKeepsRivalsApart(t *testing.T) {
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	live := t.Context()
	commit := func(ctx context.Context, reads []string, writes ...string) *combinedCommit {
		return &combinedCommit{ctx: ctx, reads: reads, writes: writes}
	}
	var (
		a = commit(live, []string{"pool", "addr1"}, "addr1")
		b = commit(live, []string{"pool", "addr1"}, "addr1") // a's rival
		c = commit(live, []string{"pool", "addr2"}, "addr2") // shares only the compared pool
		d = commit(gone, []string{"pool", "addr3"}, "addr3") // its caller left
		e = commit(live, nil, "pool")                        // writes what a and c compare
		f = commit(live, []string{"addr2"})                  // compares what c writes
	)
	cb := &combiner{queue: []*combinedCommit{a, b, c, d, e, f}}
	require.Equal(t, []*combinedCommit{a, c}, cb.take())
	require.Equal(t, []*combinedCommit{b, e, f}, cb.queue)
	require.Equal(t, []*combinedCommit{b, f}, cb.take(), "e writes the pool b compares")
	require.Equal(t, []*combinedCommit{e}, cb.take())
	require.Empty(t, cb.queue)
	require.Empty(t, cb.take())
}
