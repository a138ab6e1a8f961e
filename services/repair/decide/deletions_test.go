package decide_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/repair/decide"
)

// deleting is pool "d" (10.1.0.0/24) marked deleting at when, at etag.
func deleting(etag string, when time.Time) decide.Pool {
	p := pool("d", "10.1.0.0/24")
	p.Deleting, p.Etag, p.UpdateTime = true, etag, when
	return p
}

// remains returns n allocations of pool "d" whose owners are gone.
func remains(n int) []decide.Allocation {
	out := make([]decide.Allocation, n)
	for i := range n {
		out[i] = alloc("d", "10.1.0."+strconv.Itoa(i+1), pod("gone-"+strconv.Itoa(i), "u"), "7", old)
	}
	return out
}

// deletionInput is a synced pass at t0 over pool "p" and pool "d" being
// deleting, holding n allocations.
func deletionInput(d decide.Pool, n int) decide.Input {
	in := input(view())
	in.Pools = append(in.Pools, d)
	in.Allocations = remains(n)
	return in
}

// TestStalledDeletionIsFinished: a pool being deleted that holds as many
// allocations pass after pass is finished once seen stalled in LeakStrikes
// passes; its allocations are never judged as leaks meanwhile.
func TestStalledDeletionIsFinished(t *testing.T) {
	in := deletionInput(deleting("40", old), 3)
	want := []struct {
		strikes int
		action  decide.Action
	}{{0, ""}, {1, decide.ActionWaitingStrikes}, {2, decide.ActionWaitingStrikes}, {3, decide.ActionDelete}, {4, decide.ActionDelete}}
	for i, w := range want {
		out, err := decide.Decide(in)
		require.NoError(t, err)
		require.Equal(t, 3, out.Stats.InDeletion)
		require.Empty(t, out.Releases, "pass %d released an allocation of a pool being deleted", i+1)
		if w.action == "" {
			require.Empty(t, out.Findings, "pass %d: the first sighting cannot tell a stall", i+1)
			require.Empty(t, out.PoolDeletes)
		} else {
			require.Len(t, out.Findings, 1, "pass %d", i+1)
			f := out.Findings[0]
			require.Equal(t, decide.KindStalledDeletion, f.Kind)
			require.Equal(t, "d", f.Pool)
			require.Equal(t, "40", f.Etag)
			require.Equal(t, w.strikes, f.Strikes, "pass %d", i+1)
			require.Equal(t, w.action, f.Action, "pass %d: %s", i+1, f.Message)
			require.Contains(t, f.Message, "still holds 3 allocations")
			require.Equal(t, t0.Add(time.Minute), f.FirstSeen, "pass %d: first seen stalled in the second", i+1)
		}
		if w.action == decide.ActionDelete {
			require.Equal(t, []decide.PoolDelete{{Pool: "d", Etag: "40"}}, out.PoolDeletes)
		}
		in.Strikes = out.Strikes
		in.Now = in.Now.Add(time.Minute)
	}
}

// TestDeletionUnderWayIsNoFinding: a pool that shrinks between passes is
// being deleted by an allocator replica; once it stops shrinking it is
// counted from zero, and a new etag (deleted and created again, marked
// again) starts over too.
func TestDeletionUnderWayIsNoFinding(t *testing.T) {
	d := deleting("40", old)
	var strikes decide.Strikes
	pass := func(d decide.Pool, n int) decide.Output {
		t.Helper()
		in := deletionInput(d, n)
		in.Strikes = strikes
		out, err := decide.Decide(in)
		require.NoError(t, err)
		strikes = out.Strikes
		return out
	}
	for n := 9; n >= 6; n-- {
		out := pass(d, n)
		require.Empty(t, out.Findings, "%d allocations left: a deletion under way is no finding", n)
	}
	out := pass(d, 6)
	require.Equal(t, []brief{{Kind: decide.KindStalledDeletion, At: "d", Action: decide.ActionWaitingStrikes, Strikes: 1}}, briefs(out.Findings))
	out = pass(d, 6)
	require.Equal(t, 2, out.Findings[0].Strikes)
	out = pass(d, 5)
	require.Empty(t, out.Findings, "it went on: counted from zero")
	out = pass(d, 5)
	require.Equal(t, 1, out.Findings[0].Strikes)
	out = pass(deleting("41", old), 5)
	require.Empty(t, out.Findings, "another etag is another deletion")
	out = pass(deleting("41", old), 5)
	require.Equal(t, 1, out.Findings[0].Strikes)
	out = pass(deleting("41", old), 5)
	require.Equal(t, 2, out.Findings[0].Strikes)

	// The pool gone (deleted) is forgotten.
	in := input(view())
	in.Strikes = strikes
	out, err := decide.Decide(in)
	require.NoError(t, err)
	require.Empty(t, out.Findings)
	strikes = out.Strikes
	out = pass(deleting("41", old), 5)
	require.Empty(t, out.Findings, "a pool seen again after it was gone starts over")
}

// TestStalledDeletionRules: the grace since the pool was marked deleting,
// dry runs (nothing remembered), an incomplete view (nothing done), a
// drained pool whose own deletion was cut short, and a pool without an
// etag (nothing done).
func TestStalledDeletionRules(t *testing.T) {
	after := func(n int, in decide.Input) decide.Output {
		t.Helper()
		out, err := passes(n, in)
		require.NoError(t, err)
		return out
	}

	young := deletionInput(deleting("40", t0.Add(-30*time.Second)), 2)
	out := after(4, young)
	require.Equal(t, decide.ActionWaitingGrace, out.Findings[0].Action, out.Findings[0].Message)
	require.Contains(t, out.Findings[0].Message, "marked deleting 30s ago, grace is 1m0s")
	require.Empty(t, out.PoolDeletes)

	drained := deletionInput(deleting("40", old), 0)
	out = after(4, drained)
	require.Equal(t, decide.ActionDelete, out.Findings[0].Action)
	require.Equal(t, []decide.PoolDelete{{Pool: "d", Etag: "40"}}, out.PoolDeletes)

	in := deletionInput(deleting("40", old), 2)
	counted := after(3, in).Strikes
	in.Strikes = counted
	in.DryRun = true
	for range 3 {
		out = after(1, in)
		require.Equal(t, decide.ActionDryRun, out.Findings[0].Action)
		require.Equal(t, 3, out.Findings[0].Strikes)
		require.Empty(t, out.PoolDeletes)
	}

	in.DryRun = false
	in.Synced, in.UnsyncedReason = false, "informer pods: not synced"
	out = after(1, in)
	require.Equal(t, decide.ActionReported, out.Findings[0].Action)
	require.Contains(t, out.Findings[0].Message, "view incomplete: informer pods: not synced")
	require.Empty(t, out.PoolDeletes)

	in.Synced = true
	out = after(1, in)
	require.Equal(t, decide.ActionDelete, out.Findings[0].Action, "dry runs and an incomplete view kept the count")

	unguarded := deletionInput(deleting("", old), 2)
	out = after(4, unguarded)
	require.Equal(t, decide.ActionReported, out.Findings[0].Action)
	require.Contains(t, out.Findings[0].Message, "no etag")
	require.Empty(t, out.PoolDeletes, "a deletion that cannot be guarded by an etag")
}

// TestDeletingPoolIsNoOtherPoolsDuplicate: a pool being deleted that
// overlaps another holds an address the other pool has handed out again;
// that is no DUPLICATE, since the deleting pool's allocation goes with it.
func TestDeletingPoolIsNoOtherPoolsDuplicate(t *testing.T) {
	d := deleting("40", old)
	d.CIDRs = append(d.CIDRs, pool("", "10.0.0.0/24").CIDRs...)
	in := input(view(pod("a", "ua")), alloc("p", "10.0.0.5", pod("a", "ua"), "3", old))
	in.Pools = append(in.Pools, d)
	in.Allocations = append(in.Allocations, alloc("d", "10.0.0.5", pod("b", "ub"), "4", old))
	out, err := decide.Decide(in)
	require.NoError(t, err)
	require.Empty(t, out.Findings)
	require.Equal(t, 1, out.Stats.InDeletion)

	in.Pools[1].Deleting = false
	out, err = decide.Decide(in)
	require.NoError(t, err)
	_, dup := findingAt(out.Findings, decide.KindDuplicate, "10.0.0.5")
	require.True(t, dup, "the same pools, neither deleting, are judged: %v", briefs(out.Findings))
}
