package decide_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/repair/decide"
)

func importerSlice(name string, created time.Time, imp, svc bool) decide.Slice {
	return decide.Slice{Namespace: "shop", Name: name, UID: "uid-" + name, ResourceVersion: "7", ManagedBy: decide.ImporterManagedBy,
		ServiceName: "derived-cart", CreateTime: created, ImportExists: imp, ServiceExists: svc}
}

func TestDecideFindings(t *testing.T) {
	web := pod("web-0", "u1")
	db := pod("db-0", "u2")
	tests := []struct {
		name   string
		in     func() decide.Input
		passes int                 // passes run, strikes carried (1 if zero)
		last   func(*decide.Input) // changes only the last pass
		want   []brief
		// wantReleases are the addresses released, wantDeletes the slices
		// deleted.
		wantReleases []string
		wantDeletes  []string
	}{
		{
			name: "healthy allocation",
			in:   func() decide.Input { return input(view(web), alloc("p", "10.0.0.1", web, "5", old)) },
		},
		{
			name: "leak, first pass",
			in:   func() decide.Input { return input(view(), alloc("p", "10.0.0.1", web, "5", old)) },
			want: []brief{{decide.KindLeak, "10.0.0.1", decide.ActionWaitingStrikes, 1}},
		},
		{
			name:         "leak, third pass, past grace",
			in:           func() decide.Input { return input(view(), alloc("p", "10.0.0.1", web, "5", old)) },
			passes:       3,
			want:         []brief{{decide.KindLeak, "10.0.0.1", decide.ActionRelease, 3}},
			wantReleases: []string{"10.0.0.1"},
		},
		{
			name:   "leak, third pass, within grace",
			in:     func() decide.Input { return input(view(), alloc("p", "10.0.0.1", web, "5", t0.Add(-59*time.Second))) },
			passes: 3,
			want:   []brief{{decide.KindLeak, "10.0.0.1", decide.ActionWaitingGrace, 3}},
		},
		{
			name: "owner recreated: old uid is a leak candidate, new uid kept",
			in: func() decide.Input {
				return input(view(pod("web-0", "u9")),
					alloc("p", "10.0.0.1", web, "5", old),
					alloc("p", "10.0.0.2", pod("web-0", "u9"), "8", old))
			},
			passes:       3,
			want:         []brief{{decide.KindOwnerMismatch, "10.0.0.1", decide.ActionRelease, 3}},
			wantReleases: []string{"10.0.0.1"},
		},
		{
			name: "owner recreated and using the old address: reported, no strikes",
			in: func() decide.Input {
				v := view(pod("web-0", "u9"))
				v.AddClaim(decide.Claim{Address: netip.MustParseAddr("10.0.0.1"), Owner: pod("web-0", "u9"), Source: "Pod.status.podIPs"})
				return input(v, alloc("p", "10.0.0.1", web, "5", old))
			},
			passes: 3,
			want:   []brief{{decide.KindOwnerMismatch, "10.0.0.1", decide.ActionReported, 0}},
		},
		{
			name: "duplicate with a Service clusterIP",
			in: func() decide.Input {
				v := view(web)
				v.AddClaim(decide.Claim{Address: netip.MustParseAddr("10.0.0.1"), Owner: decide.Owner{Cluster: "a", Kind: "Service", Namespace: "default", Name: "api", UID: "s1"}, Source: "Service.spec.clusterIPs"})
				return input(v, alloc("p", "10.0.0.1", web, "5", old))
			},
			want: []brief{{decide.KindDuplicate, "10.0.0.1", decide.ActionReported, 0}},
		},
		{
			name: "the owner's own Pod IP is no duplicate",
			in: func() decide.Input {
				v := view(web)
				v.AddClaim(decide.Claim{Address: netip.MustParseAddr("10.0.0.1"), Owner: web, Source: "Pod.status.podIPs"})
				return input(v, alloc("p", "10.0.0.1", web, "5", old))
			},
		},
		{
			name: "the owner's own Pod IP keeps it alive when the view misses it",
			in: func() decide.Input {
				v := view()
				v.AddClaim(decide.Claim{Address: netip.MustParseAddr("10.0.0.1"), Owner: web, Source: "Pod.status.podIPs"})
				return input(v, alloc("p", "10.0.0.1", web, "5", old))
			},
			passes: 3,
		},
		{
			name: "duplicate across overlapping pools",
			in: func() decide.Input {
				in := input(view(web, db), alloc("p", "10.0.0.1", web, "5", old), alloc("q", "10.0.0.1", db, "6", old))
				in.Pools = append(in.Pools, pool("q", "10.0.0.0/25"))
				return in
			},
			want: []brief{
				{decide.KindDuplicate, "10.0.0.1", decide.ActionReported, 0},
				{decide.KindDuplicate, "10.0.0.1", decide.ActionReported, 0},
			},
		},
		{
			name: "same owner in two overlapping pools is no duplicate",
			in: func() decide.Input {
				in := input(view(web), alloc("p", "10.0.0.1", web, "5", old), alloc("q", "10.0.0.1", web, "6", old))
				in.Pools = append(in.Pools, pool("q", "10.0.0.0/25"))
				return in
			},
		},
		{
			name: "leak on a duplicated address is not released",
			in: func() decide.Input {
				in := input(view(db), alloc("p", "10.0.0.1", web, "5", old), alloc("q", "10.0.0.1", db, "6", old))
				in.Pools = append(in.Pools, pool("q", "10.0.0.0/25"))
				return in
			},
			passes: 3,
			want: []brief{
				{decide.KindLeak, "10.0.0.1", decide.ActionReported, 3},
				{decide.KindDuplicate, "10.0.0.1", decide.ActionReported, 0},
				{decide.KindDuplicate, "10.0.0.1", decide.ActionReported, 0},
			},
		},
		{
			name: "out of range after a forced shrink",
			in: func() decide.Input {
				in := input(view(web), alloc("p", "10.0.1.7", web, "5", old))
				return in
			},
			want: []brief{{decide.KindOutOfRange, "10.0.1.7", decide.ActionReported, 0}},
		},
		{
			name: "out of range and leaked: reported, never released",
			in: func() decide.Input {
				return input(view(), alloc("p", "10.0.1.7", web, "5", old))
			},
			passes: 5,
			want: []brief{
				{decide.KindLeak, "10.0.1.7", decide.ActionReported, 5},
				{decide.KindOutOfRange, "10.0.1.7", decide.ActionReported, 0},
			},
		},
		{
			name: "out of range into another pool's range is also a duplicate there",
			in: func() decide.Input {
				in := input(view(web, db), alloc("p", "10.0.1.7", web, "5", old), alloc("q", "10.0.1.7", db, "6", old))
				in.Pools = append(in.Pools, pool("q", "10.0.1.0/24"))
				return in
			},
			want: []brief{
				{decide.KindDuplicate, "10.0.1.7", decide.ActionReported, 0},
				{decide.KindOutOfRange, "10.0.1.7", decide.ActionReported, 0},
				{decide.KindDuplicate, "10.0.1.7", decide.ActionReported, 0},
			},
		},
		{
			name: "owner kind without a resolver is never a leak",
			in: func() decide.Input {
				return input(view(), alloc("p", "10.0.0.1", decide.Owner{Cluster: "b", Kind: "Pod", Namespace: "x", Name: "y", UID: "u"}, "5", old))
			},
			passes: 4,
		},
		{
			name: "clusterset service without uid is alive while the view has it",
			in: func() decide.Input {
				vip := decide.Owner{Kind: "ClusterSetService", Namespace: "shop", Name: "cart"}
				return input(view(vip), alloc("p", "10.0.0.9", vip, "5", old))
			},
			passes: 3,
		},
		{
			name: "allocation of a pool created after the listing is still judged",
			in: func() decide.Input {
				return input(view(), alloc("new", "192.168.0.1", web, "5", old))
			},
			passes:       3,
			want:         []brief{{decide.KindLeak, "192.168.0.1", decide.ActionRelease, 3}},
			wantReleases: []string{"192.168.0.1"},
		},
		{
			name: "orphaned importer slice",
			in: func() decide.Input {
				in := input(view())
				in.Slices = []decide.Slice{
					importerSlice("cart-a1", old, false, false),
					importerSlice("cart-a2", old, true, false),
					importerSlice("cart-a3", old, false, true),
					importerSlice("cart-new", t0.Add(-10*time.Second), false, false),
				}
				other := importerSlice("cart-mirror", old, false, false)
				other.ManagedBy = "endpointslice-controller.k8s.io"
				in.Slices = append(in.Slices, other)
				return in
			},
			passes: 3,
			want: []brief{
				{decide.KindOrphanedSlice, "shop/cart-a1", decide.ActionDelete, 3},
				{decide.KindOrphanedSlice, "shop/cart-new", decide.ActionWaitingGrace, 3},
			},
			wantDeletes: []string{"cart-a1"},
		},
		{
			name: "orphaned importer slice, before its strikes",
			in: func() decide.Input {
				in := input(view())
				in.Slices = []decide.Slice{importerSlice("cart-a1", old, false, false)}
				return in
			},
			passes: 2,
			want:   []brief{{decide.KindOrphanedSlice, "shop/cart-a1", decide.ActionWaitingStrikes, 2}},
		},
		{
			name: "dry run",
			in: func() decide.Input {
				in := input(view(), alloc("p", "10.0.0.1", web, "5", old))
				in.Slices = []decide.Slice{importerSlice("cart-a1", old, false, false)}
				return in
			},
			passes: 3,
			last:   func(in *decide.Input) { in.DryRun = true },
			want: []brief{
				{decide.KindOrphanedSlice, "shop/cart-a1", decide.ActionDryRun, 3},
				{decide.KindLeak, "10.0.0.1", decide.ActionDryRun, 3},
			},
		},
		{
			name: "release limit",
			in: func() decide.Input {
				var allocs []decide.Allocation
				live := view()
				for i := range 10 {
					o := pod(fmt.Sprintf("p%d", i), fmt.Sprintf("u%d", i))
					if i >= 3 {
						live.AddOwner(o)
					}
					allocs = append(allocs, alloc("p", fmt.Sprintf("10.0.0.%d", 10+i), o, fmt.Sprint(100+i), old))
				}
				return input(live, allocs...)
			},
			passes: 3,
			want: []brief{
				{decide.KindLeak, "10.0.0.10", decide.ActionRelease, 3},
				{decide.KindLeak, "10.0.0.11", decide.ActionLimited, 3},
				{decide.KindLeak, "10.0.0.12", decide.ActionLimited, 3},
			},
			wantReleases: []string{"10.0.0.10"},
		},
		{
			name: "unsynced view",
			in: func() decide.Input {
				in := input(view(), alloc("p", "10.0.0.1", web, "5", old))
				in.Slices = []decide.Slice{importerSlice("cart-a1", old, false, false)}
				return in
			},
			passes: 3,
			last:   func(in *decide.Input) { in.Synced, in.UnsyncedReason = false, "Pod informer not synced" },
			want: []brief{
				{decide.KindOrphanedSlice, "shop/cart-a1", decide.ActionReported, 2},
				{decide.KindLeak, "10.0.0.1", decide.ActionReported, 2},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in()
			out, err := passes(max(tt.passes, 1)-1, in)
			require.NoError(t, err)
			in.Strikes = out.Strikes
			if tt.last != nil {
				tt.last(&in)
			}
			out, err = decide.Decide(in)
			require.NoError(t, err)
			require.Equal(t, tt.want, briefs(out.Findings))
			require.Equal(t, tt.wantReleases, releasedAddrs(out.Releases))
			var deletes []string
			for _, d := range out.SliceDeletes {
				deletes = append(deletes, d.Name)
			}
			require.Equal(t, tt.wantDeletes, deletes)
		})
	}
}

func TestReleaseCarriesWhatThePassSaw(t *testing.T) {
	web := pod("web-0", "u1")
	out, err := passes(3, input(view(), alloc("p", "10.0.0.1", web, "42", old)))
	require.NoError(t, err)
	require.Equal(t, []decide.Release{{Pool: "p", Address: netip.MustParseAddr("10.0.0.1"), Etag: "42", OwnerUID: "u1", Owner: web}}, out.Releases)
	f, ok := findingAt(out.Findings, decide.KindLeak, "10.0.0.1")
	require.True(t, ok)
	require.Equal(t, "42", f.Etag)
	require.Equal(t, t0, f.FirstSeen)
	require.Contains(t, f.Message, "no longer exists")
}

func TestStrikeRule(t *testing.T) {
	web := pod("web-0", "u1")
	a := alloc("p", "10.0.0.1", web, "5", t0)

	t.Run("released on the third pass once the grace has passed", func(t *testing.T) {
		// Passes every 60 s from the allocation's creation: the owner
		// vanished at once, so the grace has passed from the first pass.
		in := input(view(), a)
		var got []decide.Action
		for i := 1; i <= 3; i++ {
			in.Now = t0.Add(time.Duration(i) * time.Minute)
			out, err := decide.Decide(in)
			require.NoError(t, err)
			f, ok := findingAt(out.Findings, decide.KindLeak, "10.0.0.1")
			require.True(t, ok)
			require.Equal(t, i, f.Strikes)
			require.Equal(t, t0.Add(time.Minute), f.FirstSeen)
			got = append(got, f.Action)
			in.Strikes = out.Strikes
		}
		require.Equal(t, []decide.Action{decide.ActionWaitingStrikes, decide.ActionWaitingStrikes, decide.ActionRelease}, got)
	})

	t.Run("three strikes within the grace wait for it", func(t *testing.T) {
		in := input(view(), a)
		var got []decide.Action
		for i := 1; i <= 5; i++ {
			in.Now = t0.Add(time.Duration(i) * 20 * time.Second) // 20 s … 100 s old
			out, err := decide.Decide(in)
			require.NoError(t, err)
			f, _ := findingAt(out.Findings, decide.KindLeak, "10.0.0.1")
			got = append(got, f.Action)
			in.Strikes = out.Strikes
		}
		require.Equal(t, []decide.Action{decide.ActionWaitingStrikes, decide.ActionWaitingStrikes,
			decide.ActionWaitingGrace, decide.ActionRelease, decide.ActionRelease}, got)
	})

	t.Run("an owner seen again resets the strikes", func(t *testing.T) {
		gone, back := input(view(), a), input(view(web), a)
		gone.Now, back.Now = old.Add(2*time.Hour), old.Add(2*time.Hour)
		out, err := passes(2, gone)
		require.NoError(t, err)
		n, _, ok := out.Strikes.Count(a.Key())
		require.True(t, ok)
		require.Equal(t, 2, n)

		back.Strikes = out.Strikes
		out, err = decide.Decide(back)
		require.NoError(t, err)
		require.Empty(t, out.Findings)
		require.Zero(t, out.Strikes.Len())

		// Gone again: counting starts over, so no release on this pass
		// nor the next.
		gone.Strikes = out.Strikes
		out, err = passes(2, gone)
		require.NoError(t, err)
		f, _ := findingAt(out.Findings, decide.KindLeak, "10.0.0.1")
		require.Equal(t, 2, f.Strikes)
		require.Equal(t, decide.ActionWaitingStrikes, f.Action)
		require.Empty(t, out.Releases)
	})

	t.Run("an address allocated again starts fresh", func(t *testing.T) {
		in := input(view(), alloc("p", "10.0.0.1", web, "5", old))
		out, err := passes(2, in)
		require.NoError(t, err)
		in = input(view(), alloc("p", "10.0.0.1", pod("web-1", "u7"), "9", old))
		in.Strikes = out.Strikes
		out, err = decide.Decide(in)
		require.NoError(t, err)
		f, _ := findingAt(out.Findings, decide.KindLeak, "10.0.0.1")
		require.Equal(t, 1, f.Strikes)
		require.Equal(t, 1, out.Strikes.Len(), "the old etag's strikes are forgotten")
	})
}

// TestOrphanStrikes: an orphaned slice's strikes count consecutive
// passes; a pass that sees its ServiceImport back forgets them, and a
// slice created again under the same name starts from zero.
func TestOrphanStrikes(t *testing.T) {
	orphanIn := func(s decide.Slice) decide.Input {
		in := input(view())
		in.Slices = []decide.Slice{s}
		return in
	}
	orphaned := importerSlice("cart-a1", old, false, false)
	strikes := func(out decide.Output) (int, decide.Action) {
		t.Helper()
		require.Len(t, out.Findings, 1)
		return out.Findings[0].Strikes, out.Findings[0].Action
	}

	in := orphanIn(orphaned)
	out, err := passes(2, in)
	require.NoError(t, err)
	n, action := strikes(out)
	require.Equal(t, 2, n)
	require.Equal(t, decide.ActionWaitingStrikes, action)

	// The ServiceImport is back for one pass.
	back := orphanIn(importerSlice("cart-a1", old, true, false))
	back.Strikes = out.Strikes
	out, err = decide.Decide(back)
	require.NoError(t, err)
	require.Empty(t, out.Findings)

	in.Strikes = out.Strikes
	out, err = passes(2, in)
	require.NoError(t, err)
	n, action = strikes(out)
	require.Equal(t, 2, n, "counting started over")
	require.Equal(t, decide.ActionWaitingStrikes, action)
	require.Empty(t, out.SliceDeletes)

	// The same name under a new uid is another slice.
	again := orphaned
	again.UID = "uid-cart-a1-again"
	next := orphanIn(again)
	next.Strikes = out.Strikes
	out, err = decide.Decide(next)
	require.NoError(t, err)
	n, _ = strikes(out)
	require.Equal(t, 1, n)

	// The third consecutive pass deletes.
	out, err = passes(3, orphanIn(orphaned))
	require.NoError(t, err)
	n, action = strikes(out)
	require.Equal(t, 3, n)
	require.Equal(t, decide.ActionDelete, action)
	require.Len(t, out.SliceDeletes, 1)
}

func TestOwnerRecreated(t *testing.T) {
	oldPod, newPod := pod("web-0", "u1"), pod("web-0", "u2")
	in := input(view(newPod),
		alloc("p", "10.0.0.1", oldPod, "5", old),
		alloc("p", "10.0.0.2", newPod, "6", t0.Add(-time.Minute)))
	for i := 1; i <= 3; i++ {
		out, err := decide.Decide(in)
		require.NoError(t, err)
		require.Len(t, out.Findings, 1, "the new uid's allocation is kept")
		f := out.Findings[0]
		require.Equal(t, decide.KindOwnerMismatch, f.Kind)
		require.Equal(t, "10.0.0.1", f.Address.String())
		require.Equal(t, i, f.Strikes)
		require.Contains(t, f.Message, "recreated (now uid u2)")
		require.Contains(t, f.Message, "leak candidate")
		if i < 3 {
			require.Empty(t, out.Releases)
		} else {
			require.Equal(t, []decide.Release{{Pool: "p", Address: netip.MustParseAddr("10.0.0.1"), Etag: "5", OwnerUID: "u1", Owner: oldPod}}, out.Releases)
		}
		in.Strikes = out.Strikes
	}
}

func TestUnsyncedViewActsOnNothing(t *testing.T) {
	in := input(view(), alloc("p", "10.0.0.1", pod("web-0", "u1"), "5", old), alloc("p", "10.0.0.2", pod("web-1", "u2"), "6", old))
	in.Slices = []decide.Slice{importerSlice("cart-a1", old, false, false)}
	ready, err := passes(2, in)
	require.NoError(t, err)

	in.Strikes = ready.Strikes
	in.Synced, in.UnsyncedReason = false, "source cluster b unreachable"
	for range 3 {
		out, err := decide.Decide(in)
		require.NoError(t, err)
		require.Equal(t, decide.StateUnsynced, out.State)
		require.Equal(t, "source cluster b unreachable", out.Reason)
		require.Empty(t, out.Releases)
		require.Empty(t, out.SliceDeletes)
		require.Len(t, out.Findings, 3)
		for _, f := range out.Findings {
			require.Equal(t, decide.ActionReported, f.Action)
			require.Contains(t, f.Message, "view incomplete: source cluster b unreachable")
		}
		n, _, _ := out.Strikes.Count(in.Allocations[0].Key())
		require.Equal(t, 2, n, "strikes are not advanced")
		in.Strikes = out.Strikes
	}

	in.Synced, in.UnsyncedReason = false, ""
	out, err := decide.Decide(in)
	require.NoError(t, err)
	require.Equal(t, "view not synced", out.Reason)

	// Synced again: the strikes counted before go on.
	in.Synced = true
	out, err = decide.Decide(in)
	require.NoError(t, err)
	require.Equal(t, decide.StateComplete, out.State)
	require.Len(t, out.Releases, 1) // 2 allocations, 10 %: at least one
	require.Len(t, out.SliceDeletes, 1)
}

func TestDryRunDoesNotAdvanceStrikes(t *testing.T) {
	a := alloc("p", "10.0.0.1", pod("web-0", "u1"), "5", old)
	in := input(view(), a)
	out, err := passes(2, in)
	require.NoError(t, err)

	dry := in
	dry.Strikes, dry.DryRun = out.Strikes, true
	for range 3 {
		d, err := decide.Decide(dry)
		require.NoError(t, err)
		require.True(t, d.DryRun)
		require.Empty(t, d.Releases)
		f, _ := findingAt(d.Findings, decide.KindLeak, "10.0.0.1")
		require.Equal(t, decide.ActionDryRun, f.Action, "a real pass now would release it")
		require.Equal(t, 3, f.Strikes)
		n, _, _ := d.Strikes.Count(a.Key())
		require.Equal(t, 2, n)
		dry.Strikes = d.Strikes
	}

	in.Strikes = dry.Strikes
	out, err = decide.Decide(in)
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.1"}, releasedAddrs(out.Releases))
}

func TestReleaseFractionLimit(t *testing.T) {
	tests := []struct {
		allocs, leaks int
		fraction      float64
		want          int
	}{
		{allocs: 10, leaks: 3, fraction: 0.10, want: 1},
		{allocs: 100, leaks: 20, fraction: 0.10, want: 10},
		{allocs: 100, leaks: 5, fraction: 0.10, want: 5},
		{allocs: 19, leaks: 19, fraction: 0.10, want: 1},
		{allocs: 5, leaks: 5, fraction: 0.10, want: 1}, // at least one
		{allocs: 100, leaks: 40, fraction: 0.29, want: 29},
		{allocs: 100, leaks: 40, fraction: 0, want: 0},
		{allocs: 4, leaks: 4, fraction: 1, want: 4},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d of %d at %v", tt.leaks, tt.allocs, tt.fraction), func(t *testing.T) {
			live := view()
			var allocs []decide.Allocation
			for i := range tt.allocs {
				o := pod(fmt.Sprintf("p%d", i), fmt.Sprintf("u%d", i))
				if i >= tt.leaks {
					live.AddOwner(o)
				}
				allocs = append(allocs, alloc("p", netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}).String(), o, fmt.Sprint(i+1), old))
			}
			in := input(live, allocs...)
			in.Config.MaxReleaseFraction = tt.fraction
			out, err := passes(3, in)
			require.NoError(t, err)
			require.Len(t, out.Releases, tt.want)
			limited := 0
			for _, f := range out.Findings {
				if f.Action == decide.ActionLimited {
					limited++
					n, _, ok := out.Strikes.Count(decide.AllocationKey{Pool: f.Pool, Address: f.Address, Etag: f.Etag})
					require.True(t, ok)
					require.Equal(t, 3, n, "limited leaks keep their strikes")
				}
			}
			require.Equal(t, tt.leaks-tt.want, limited)
		})
	}

	t.Run("limited leaks are released by the following passes", func(t *testing.T) {
		live := view()
		var allocs []decide.Allocation
		for i := range 10 {
			o := pod(fmt.Sprintf("p%d", i), fmt.Sprintf("u%d", i))
			if i >= 3 {
				live.AddOwner(o)
			}
			allocs = append(allocs, alloc("p", fmt.Sprintf("10.0.0.%d", 10+i), o, fmt.Sprint(i+1), old))
		}
		in := input(live, allocs...)
		var released []string
		for range 8 {
			out, err := decide.Decide(in)
			require.NoError(t, err)
			require.LessOrEqual(t, len(out.Releases), 1)
			results := map[decide.AllocationKey]error{}
			for _, r := range out.Releases {
				results[r.Key()] = nil
				released = append(released, r.Address.String())
				in.Allocations = removeAlloc(in.Allocations, r.Address)
			}
			require.NoError(t, out.ApplyReleaseResults(results))
			in.Strikes = out.Strikes
		}
		require.Equal(t, []string{"10.0.0.10", "10.0.0.11", "10.0.0.12"}, released)
	})
}

func removeAlloc(as []decide.Allocation, addr netip.Addr) []decide.Allocation {
	out := as[:0:0]
	for _, a := range as {
		if a.Address != addr {
			out = append(out, a)
		}
	}
	return out
}

func TestApplyReleaseResults(t *testing.T) {
	var allocs []decide.Allocation
	for i := range 4 {
		allocs = append(allocs, alloc("p", fmt.Sprintf("10.0.0.%d", i+1), pod(fmt.Sprintf("p%d", i), "u"), fmt.Sprint(i+1), old))
	}
	in := input(view(), allocs...)
	in.Config.MaxReleaseFraction = 1
	out, err := passes(3, in)
	require.NoError(t, err)
	require.Len(t, out.Releases, 4)

	stray := decide.AllocationKey{Pool: "p", Address: netip.MustParseAddr("10.0.0.99"), Etag: "1"}
	err = out.ApplyReleaseResults(map[decide.AllocationKey]error{
		out.Releases[0].Key(): nil,
		out.Releases[1].Key(): fmt.Errorf("release: etag is 9, not 2: %w", decide.ErrChangedHands),
		out.Releases[2].Key(): errors.New("allocator unavailable"),
		stray:                 nil,
	})
	require.ErrorIs(t, err, decide.ErrUnknownRelease)
	require.ErrorContains(t, err, "p/10.0.0.99@1")

	want := []decide.Action{decide.ActionReleased, decide.ActionReleaseRefused, decide.ActionReleaseFailed, decide.ActionReleaseFailed}
	for i, f := range out.Findings {
		require.Equal(t, want[i], f.Action, f.Address.String())
		_, _, kept := out.Strikes.Count(allocs[i].Key())
		require.Equal(t, i >= 2, kept, "strikes kept only for failures, to be retried")
	}
	require.Contains(t, out.Findings[1].Message, "changed hands")
	require.Contains(t, out.Findings[2].Message, "allocator unavailable")
	require.Contains(t, out.Findings[3].Message, "no outcome recorded")
}

func TestFirstSeenIsCarried(t *testing.T) {
	v := view(pod("web-0", "u1"))
	in := input(v, alloc("p", "10.0.3.1", pod("web-0", "u1"), "5", old))
	in.Slices = []decide.Slice{importerSlice("cart-a1", t0, false, false)}
	out, err := decide.Decide(in)
	require.NoError(t, err)
	in.Strikes = out.Strikes
	in.Now = t0.Add(time.Hour)
	out, err = decide.Decide(in)
	require.NoError(t, err)
	require.Len(t, out.Findings, 2)
	for _, f := range out.Findings {
		require.Equal(t, t0, f.FirstSeen, f.Kind)
	}
}

func TestOutputIsDeterministic(t *testing.T) {
	web, db := pod("web-0", "u1"), pod("db-0", "u2")
	v := view(db)
	v.AddClaim(decide.Claim{Address: netip.MustParseAddr("10.0.0.3"), Owner: pod("x", "u3")})
	v.AddClaim(decide.Claim{Address: netip.MustParseAddr("10.0.0.3"), Owner: pod("y", "u4")})
	in := input(v,
		alloc("p", "10.0.0.5", web, "1", old),
		alloc("q", "10.0.0.5", db, "2", old),
		alloc("p", "10.0.0.3", pod("z", "u5"), "3", old),
		alloc("p", "10.0.9.1", pod("w", "u6"), "4", old),
		alloc("q", "10.0.0.6", pod("v", "u7"), "5", old),
		alloc("p", "10.0.0.2", pod("v", "u8"), "6", old))
	in.Pools = append(in.Pools, pool("q", "10.0.0.0/28"))
	in.Slices = []decide.Slice{importerSlice("b", old, false, false), importerSlice("a", old, false, false)}
	in.Config.MaxReleaseFraction = 1
	want, err := passes(3, in)
	require.NoError(t, err)
	require.NotEmpty(t, want.Releases)

	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		in.Allocations = append([]decide.Allocation{}, in.Allocations...)
		rng.Shuffle(len(in.Allocations), func(i, j int) { in.Allocations[i], in.Allocations[j] = in.Allocations[j], in.Allocations[i] })
		rng.Shuffle(len(in.Slices), func(i, j int) { in.Slices[i], in.Slices[j] = in.Slices[j], in.Slices[i] })
		got, err := passes(3, in)
		require.NoError(t, err)
		require.Equal(t, want.Findings, got.Findings)
		require.Equal(t, want.Releases, got.Releases)
		require.Equal(t, want.SliceDeletes, got.SliceDeletes)
	}
}

func TestDecideDoesNotModifyItsInput(t *testing.T) {
	a := alloc("p", "10.0.0.1", pod("web-0", "u1"), "5", old)
	in := input(view(), a)
	out, err := passes(2, in)
	require.NoError(t, err)
	in.Strikes = out.Strikes
	for range 3 {
		_, err := decide.Decide(in)
		require.NoError(t, err)
	}
	n, _, _ := in.Strikes.Count(a.Key())
	require.Equal(t, 2, n)
}

func TestInvalidInput(t *testing.T) {
	web := pod("web-0", "u1")
	tests := []struct {
		name   string
		mutate func(*decide.Input)
	}{
		{"no strikes", func(in *decide.Input) { in.Config.LeakStrikes = 0 }},
		{"negative grace", func(in *decide.Input) { in.Config.LeakGrace = -time.Second }},
		{"fraction above one", func(in *decide.Input) { in.Config.MaxReleaseFraction = 1.5 }},
		{"no view", func(in *decide.Input) { in.Owners = nil }},
		{"no etag", func(in *decide.Input) { in.Allocations[0].Etag = "" }},
		{"invalid address", func(in *decide.Input) { in.Allocations[0].Address = netip.Addr{} }},
		{"zoned address", func(in *decide.Input) {
			in.Allocations[0].Address = netip.MustParseAddr("fe80::1%eth0")
		}},
		{"pool listed twice", func(in *decide.Input) { in.Pools = append(in.Pools, in.Pools[0]) }},
		{"invalid CIDR", func(in *decide.Input) { in.Pools[0].CIDRs = append(in.Pools[0].CIDRs, netip.Prefix{}) }},
		{"leaked allocation listed twice", func(in *decide.Input) { in.Allocations = append(in.Allocations, in.Allocations[0]) }},
		{"overlapping allocation listed twice", func(in *decide.Input) {
			in.Pools = append(in.Pools, pool("q", "10.0.0.0/28"))
			in.Owners = view(web)
			in.Allocations = append(in.Allocations, in.Allocations[0])
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := input(view(), alloc("p", "10.0.0.1", web, "5", old))
			tt.mutate(&in)
			_, err := decide.Decide(in)
			require.ErrorIs(t, err, decide.ErrInvalidInput)
		})
	}
}

func TestParallelScanMatchesSequential(t *testing.T) {
	defer decide.SetMinChunk(1000)()
	in := fleet(20_000)
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	want, err := passes(3, in)
	require.NoError(t, err)
	require.Len(t, want.Releases, 200)

	runtime.GOMAXPROCS(4)
	got, err := passes(3, in)
	require.NoError(t, err)
	require.Equal(t, want.Findings, got.Findings)
	require.Equal(t, want.Releases, got.Releases)
	require.Equal(t, want.Stats, got.Stats)

	// An invalid allocation is reported the same way whichever chunk
	// holds it: the first in input order.
	in.Allocations = append([]decide.Allocation{}, in.Allocations...)
	in.Allocations[19_000].Etag = ""
	in.Allocations[10].Etag = ""
	_, err = decide.Decide(in)
	require.ErrorIs(t, err, decide.ErrInvalidInput)
	require.ErrorContains(t, err, in.Allocations[10].Address.String())
}
