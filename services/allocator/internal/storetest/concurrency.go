package storetest

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/store"
)

const racers = 64

type win struct {
	racer int
	rev   int64
}

// testConcurrentAllocationAbsent: many allocators racing for the same
// addresses, each guarded by CondAllocationAbsent; exactly one wins each.
func testConcurrentAllocationAbsent(t *testing.T, s store.Store, sharedRevisions bool) {
	const addrs = 16
	start := commit(t, s, txn(putPool(newPool("p", "10.0.0.0/24"))))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins = make(map[int][]win)
		errs []error
	)
	for r := range racers {
		wg.Go(func() {
			for j := range addrs {
				i := (r + j) % addrs
				addr := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}).String()
				rev, err := s.Commit(t.Context(), store.Txn{
					Conds: []store.Cond{allocAbsent("p", addr)},
					Ops:   []store.Op{putAlloc(newAlloc("p", addr, fmt.Sprint("racer-", r)))},
				})
				mu.Lock()
				switch {
				case err == nil:
					wins[i] = append(wins[i], win{r, rev})
				case !errors.Is(err, store.ErrConflict):
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)

	var revs []int64
	snap := snapshot(t, s)
	require.Len(t, snap.Allocations, addrs)
	for i, a := range snap.Allocations {
		require.Len(t, wins[i], 1, "address %s won %d times", a.Address, len(wins[i]))
		w := wins[i][0]
		require.Equal(t, fmt.Sprint("racer-", w.racer), a.Owner.Name)
		require.Equal(t, w.rev, a.Revision)
		revs = append(revs, w.rev)
	}
	slices.Sort(revs)
	revs = slices.Compact(revs)
	if !sharedRevisions {
		require.Len(t, revs, addrs, "two commits got the same revision")
	}
	require.Equal(t, start+int64(len(revs)), snap.Revision, "failed commits must not take revisions")
}

// testConcurrentOwnerAbsent: many replicas allocating different addresses
// for the same owner (a retry storm); exactly one wins.
func testConcurrentOwnerAbsent(t *testing.T, s store.Store) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  []int
		errs []error
	)
	for r := range racers {
		wg.Go(func() {
			a := newAlloc("p", netip.AddrFrom4([4]byte{10, 0, 1, byte(r)}).String(), "web-0")
			a.Owner.UID = fmt.Sprint("uid-", r)
			_, err := s.Commit(t.Context(), store.Txn{
				Conds: []store.Cond{ownerAbsent("p", a.Owner), allocAbsent("p", a.Address.String())},
				Ops:   []store.Op{putAlloc(a)},
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, r)
			case !errors.Is(err, store.ErrConflict):
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, won, 1)
	snap := snapshot(t, s)
	require.Len(t, snap.Allocations, 1)
	require.Equal(t, fmt.Sprint("uid-", won[0]), snap.Allocations[0].Owner.UID)
}

// testSnapshotIsConsistent takes snapshots while pairs of allocations are
// committed together, and checks each snapshot holds exactly the commits
// up to its revision.
func testSnapshotIsConsistent(t *testing.T, s store.Store) {
	const (
		writers   = 4
		perWriter = 50
		maxSnaps  = 50
	)
	// Commits made at once may share a revision (WithSharedRevisions),
	// so a revision maps to every allocation committed at it.
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		byRev = make(map[int64][]string)
		errs  []error
	)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				addr := netip.AddrFrom4([4]byte{10, 0, byte(w), byte(i)}).String()
				rev, err := s.Commit(t.Context(), txn(
					putAlloc(newAlloc("a", addr, "x")),
					putAlloc(newAlloc("b", addr, "x")),
				))
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					byRev[rev] = append(byRev[rev], "a/"+addr, "b/"+addr)
				}
				mu.Unlock()
			}
		})
	}
	// Whole-store snapshots, and snapshots of pool a alone (Pools is
	// left empty in those), taken in turn.
	var snaps []*store.Snapshot
	take := func() {
		if len(snaps)%2 == 0 {
			snaps = append(snaps, snapshot(t, s))
			return
		}
		rev, allocs := pages(t, s, 0, "a", 1<<20)
		require.True(t, slices.IsSortedFunc(allocs, func(x, y store.Allocation) int { return x.Address.Compare(y.Address) }))
		snaps = append(snaps, &store.Snapshot{Revision: rev, Allocations: allocs})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running && len(snaps) < maxSnaps; {
		select {
		case <-done:
			running = false
		default:
		}
		take()
	}
	<-done
	require.Empty(t, errs)
	take()
	snaps = append(snaps, snapshot(t, s))

	for i, snap := range snaps {
		requireCommitsUpTo(t, snap, byRev, i%2 == 1 && i < len(snaps)-1)
	}
	require.Len(t, snaps[len(snaps)-1].Allocations, 2*writers*perWriter)
}

// requireCommitsUpTo requires snap to hold exactly the allocations
// committed at its revision or before (byRev; of pool a alone with
// onlyA), each at the revision of its commit.
func requireCommitsUpTo(t *testing.T, snap *store.Snapshot, byRev map[int64][]string, onlyA bool) {
	t.Helper()
	var want, got []string
	for rev, allocs := range byRev {
		if rev <= snap.Revision {
			for _, a := range allocs {
				if !onlyA || strings.HasPrefix(a, "a/") {
					want = append(want, a)
				}
			}
		}
	}
	for _, a := range snap.Allocations {
		got = append(got, a.Pool+"/"+a.Address.String())
		allocs, ok := byRev[a.Revision]
		require.True(t, ok, "allocation %s has revision %d, which no commit returned", a.Address, a.Revision)
		require.Contains(t, allocs, a.Pool+"/"+a.Address.String())
	}
	require.ElementsMatch(t, want, got, "snapshot at revision %d", snap.Revision)
}

// testConcurrentAllocateRelease: the revision a Commit returns is the
// etag of what it wrote, even when commits are batched together, so a
// guarded release with it succeeds. Many goroutines allocate and release
// on a few addresses.
func testConcurrentAllocateRelease(t *testing.T, s store.Store) {
	const (
		workers = 64
		rounds  = 30
		addrs   = 48
	)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				o := owner(fmt.Sprintf("w%d-r%d", w, r), "uid")
				var rev int64
				var addr string
				for i := range addrs {
					addr = netip.AddrFrom4([4]byte{10, 0, 0, byte((w + r + i) % addrs)}).String()
					var err error
					rev, err = s.Commit(t.Context(), store.Txn{
						Conds: []store.Cond{allocAbsent("p", addr), ownerAbsent("p", o)},
						Ops:   []store.Op{putAlloc(&store.Allocation{Pool: "p", Address: netip.MustParseAddr(addr), Owner: o})},
					})
					if err == nil {
						break
					}
					if !errors.Is(err, store.ErrConflict) {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
				}
				if rev == 0 {
					continue // every address taken at the moment
				}
				_, err := s.Commit(t.Context(), store.Txn{
					Conds: []store.Cond{{Kind: store.CondAllocationRevision, Pool: "p", Address: netip.MustParseAddr(addr), Revision: rev}},
					Ops:   []store.Op{delAlloc("p", addr)},
				})
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("release %s allocated at revision %d: %w", addr, rev, err))
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Empty(t, snapshot(t, s).Allocations)
}
