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

// TestTakeKeepsWithinOpBudget: a combined transaction of n commits whose
// largest has m compares or writes needs n+m within etcd's --max-txn-ops
// (defaultMaxTxnOps here); the commits beyond keep their places, and a
// commit too large to share a transaction goes alone.
func TestTakeKeepsWithinOpBudget(t *testing.T) {
	commit := func(size int) *combinedCommit { return &combinedCommit{ctx: t.Context(), size: size} }
	big, huge := commit(122), commit(200)
	small := make([]*combinedCommit, 10)
	for i := range small {
		small[i] = commit(5)
	}
	c := &combiner{queue: append([]*combinedCommit{small[0], big, huge}, small[1:]...)}
	// 6 commits with 122 writes at most: 128. A seventh would be 129.
	require.Equal(t, []*combinedCommit{small[0], big, small[1], small[2], small[3], small[4]}, c.take())
	require.Equal(t, []*combinedCommit{huge, small[5], small[6], small[7], small[8], small[9]}, c.queue)
	require.Equal(t, []*combinedCommit{huge}, c.take(), "too large to share, it goes alone")
	require.Equal(t, small[5:], c.take())

	// A budget learned from etcd's refusals applies the same way.
	c = &combiner{maxOps: 100, queue: []*combinedCommit{commit(92), small[0], small[1], small[2], small[3], small[4], small[5], small[6], small[7], small[8]}}
	require.Len(t, c.take(), 8)
	require.Len(t, c.queue, 2)
}
