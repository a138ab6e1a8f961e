package decide_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/repair/decide"
)

// allocator is a one-pool allocator as small as the race needs: records
// address → (owner, etag), a guarded release that checks etag and owner uid,
// and an Allocate that is idempotent per owner identity.
type allocator struct {
	pool    netip.Prefix
	rev     int64
	records map[netip.Addr]record
	// rebind makes Allocate by a recreated owner (same identity, new uid)
	// re-bind its old record to the new uid with a new etag, so the
	// record visibly changes hands. Without it the record is handed over
	// unchanged.
	rebind bool
	// unguarded ignores the guards, as a release by address alone would.
	unguarded bool
}

type record struct {
	owner   decide.Owner
	etag    string
	created time.Time
}

func newAllocator(cidr string) *allocator {
	return &allocator{pool: netip.MustParsePrefix(cidr), records: make(map[netip.Addr]record), rebind: true}
}

func (a *allocator) nextEtag() string {
	a.rev++
	return strconv.FormatInt(a.rev, 10)
}

// allocate returns the address of o, allocating addr (or the lowest free
// address when addr is invalid) if o's identity holds none.
func (a *allocator) allocate(o decide.Owner, addr netip.Addr, now time.Time) (netip.Addr, bool) {
	for at, r := range a.records {
		if r.owner.Identity() == o.Identity() {
			if r.owner.UID != o.UID && a.rebind {
				a.records[at] = record{owner: o, etag: a.nextEtag(), created: r.created}
			}
			return at, true
		}
	}
	if !addr.IsValid() {
		for c := a.pool.Addr(); a.pool.Contains(c); c = c.Next() {
			if _, taken := a.records[c]; !taken {
				addr = c
				break
			}
		}
	}
	if _, taken := a.records[addr]; taken || !addr.IsValid() {
		return netip.Addr{}, false
	}
	a.records[addr] = record{owner: o, etag: a.nextEtag(), created: now}
	return addr, true
}

func (a *allocator) release(addr netip.Addr) { delete(a.records, addr) }

func (a *allocator) guardedRelease(r decide.Release) error {
	cur, ok := a.records[r.Address]
	if !a.unguarded {
		if !ok {
			return fmt.Errorf("release %s: allocation not found: %w", r.Address, decide.ErrChangedHands)
		}
		if cur.etag != r.Etag {
			return fmt.Errorf("release %s: etag is %s, not %s: %w", r.Address, cur.etag, r.Etag, decide.ErrChangedHands)
		}
		if cur.owner.UID != r.OwnerUID {
			return fmt.Errorf("release %s: held by uid %s, not %s: %w", r.Address, cur.owner.UID, r.OwnerUID, decide.ErrChangedHands)
		}
	}
	delete(a.records, r.Address)
	return nil
}

func (a *allocator) list() []decide.Allocation {
	out := make([]decide.Allocation, 0, len(a.records))
	for at, r := range a.records {
		out = append(out, decide.Allocation{Pool: "p", Address: at, Owner: r.owner, Etag: r.etag, CreateTime: r.created})
	}
	// Map order would make the seeded runs differ between runs.
	slices.SortFunc(out, func(x, y decide.Allocation) int { return x.Address.Compare(y.Address) })
	return out
}

func TestRaceReleasedAndReallocatedBetweenReadAndRelease(t *testing.T) {
	for _, tc := range []struct {
		name string
		// between runs after the pass read the allocations and before
		// its release reaches the allocator.
		between func(a *allocator, addr netip.Addr, now time.Time) decide.Owner
	}{
		{
			name: "address released and allocated to another owner",
			between: func(a *allocator, addr netip.Addr, now time.Time) decide.Owner {
				a.release(addr)
				api := pod("api-0", "u2")
				_, ok := a.allocate(api, addr, now)
				require.True(t, ok)
				return api
			},
		},
		{
			name: "owner recreated under the same name takes the address back",
			between: func(a *allocator, addr netip.Addr, now time.Time) decide.Owner {
				web := pod("web-0", "u3")
				got, ok := a.allocate(web, netip.Addr{}, now)
				require.True(t, ok)
				require.Equal(t, addr, got)
				return web
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alloc := newAllocator("10.1.0.0/28")
			addr, ok := alloc.allocate(pod("web-0", "u1"), netip.Addr{}, t0)
			require.True(t, ok)
			live := view() // web-0 (u1) was deleted; its allocation leaked

			in := input(live)
			in.Pools = []decide.Pool{pool("p", "10.1.0.0/28")}
			var out decide.Output
			for i := 1; i <= 3; i++ {
				in.Now = t0.Add(time.Duration(i) * time.Minute)
				in.Allocations = alloc.list()
				var err error
				out, err = decide.Decide(in)
				require.NoError(t, err)
				in.Strikes = out.Strikes
			}
			require.Len(t, out.Releases, 1, "the third pass plans the release")
			planned := out.Releases[0]
			require.Equal(t, addr, planned.Address)
			require.Equal(t, "u1", planned.OwnerUID)

			holder := tc.between(alloc, addr, in.Now)
			live.AddOwner(holder)

			err := alloc.guardedRelease(planned)
			require.ErrorIs(t, err, decide.ErrChangedHands)
			require.NoError(t, out.ApplyReleaseResults(map[decide.AllocationKey]error{planned.Key(): err}))

			require.Equal(t, holder, alloc.records[addr].owner, "the new owner keeps the address")
			f, _ := findingAt(out.Findings, decide.KindLeak, addr.String())
			require.Equal(t, decide.ActionReleaseRefused, f.Action)
			require.Contains(t, f.Message, "changed hands")
			require.Zero(t, out.Strikes.Len(), "the refused allocation's strikes are forgotten")

			in.Strikes = out.Strikes
			in.Now = in.Now.Add(time.Minute)
			in.Allocations = alloc.list()
			next, err := decide.Decide(in)
			require.NoError(t, err)
			require.Empty(t, next.Findings)
		})
	}
}

// world is the cluster side of the randomized race: owners that come and
// go, and the address each live owner believes it holds.
type world struct {
	rng     *rand.Rand
	now     time.Time
	alloc   *allocator
	alive   map[decide.Identity]string // identity → uid of the live owner
	holding map[string]netip.Addr      // uid → address it uses
	names   []string
	nextUID int
}

func newWorld(seed uint64, a *allocator) *world {
	w := &world{
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		now:     t0,
		alloc:   a,
		alive:   make(map[decide.Identity]string),
		holding: make(map[string]netip.Addr),
	}
	for i := range 12 {
		w.names = append(w.names, fmt.Sprintf("w%d", i))
	}
	return w
}

func (w *world) owner(name, uid string) decide.Owner {
	// Even names are Pods, whose IP is a visible claim; odd ones are
	// external workloads, whose use of an address nothing else shows.
	n, _ := strconv.Atoi(name[1:])
	if n%2 == 0 {
		return pod(name, uid)
	}
	return workload(name, uid)
}

func (w *world) liveOwners() []decide.Owner {
	var out []decide.Owner
	for _, n := range w.names {
		o := w.owner(n, "")
		if uid, ok := w.alive[o.Identity()]; ok {
			o.UID = uid
			out = append(out, o)
		}
	}
	return out
}

// step applies one random change: an owner created (possibly recreating a
// deleted name) and given an address now or later, an owner deleted with or without
// releasing, an address released and handed to someone else at once.
func (w *world) step() {
	switch w.rng.IntN(5) {
	case 0, 1: // create an owner and allocate for it
		name := w.names[w.rng.IntN(len(w.names))]
		o := w.owner(name, "")
		if _, ok := w.alive[o.Identity()]; ok {
			return
		}
		w.nextUID++
		o.UID = fmt.Sprintf("u%d", w.nextUID)
		w.alive[o.Identity()] = o.UID
		if w.rng.IntN(2) == 0 {
			return // not networked yet: it asks later (case 4)
		}
		if addr, ok := w.alloc.allocate(o, netip.Addr{}, w.now); ok {
			w.holding[o.UID] = addr
		}
	case 2: // delete an owner; half the time its address leaks
		live := w.liveOwners()
		if len(live) == 0 {
			return
		}
		o := live[w.rng.IntN(len(live))]
		delete(w.alive, o.Identity())
		if addr, ok := w.holding[o.UID]; ok && w.rng.IntN(2) == 0 {
			w.alloc.release(addr)
		}
		delete(w.holding, o.UID)
	case 3: // an address released and at once allocated to a new owner
		addrs := w.alloc.list()
		if len(addrs) == 0 {
			return
		}
		a := addrs[w.rng.IntN(len(addrs))]
		for uid, at := range w.holding {
			if at == a.Address {
				delete(w.holding, uid) // its owner gave it up
			}
		}
		w.alloc.release(a.Address)
		name := w.names[w.rng.IntN(len(w.names))]
		o := w.owner(name, "")
		if uid, ok := w.alive[o.Identity()]; ok {
			if _, holds := w.holding[uid]; holds {
				return
			}
			o.UID = uid
		} else {
			w.nextUID++
			o.UID = fmt.Sprintf("u%d", w.nextUID)
			w.alive[o.Identity()] = o.UID
		}
		if addr, ok := w.alloc.allocate(o, a.Address, w.now); ok {
			w.holding[o.UID] = addr
		}
	case 4: // a live owner without an address asks again
		for _, o := range w.liveOwners() {
			if _, ok := w.holding[o.UID]; !ok {
				if addr, ok := w.alloc.allocate(o, netip.Addr{}, w.now); ok {
					w.holding[o.UID] = addr
				}
				return
			}
		}
	}
}

func (w *world) steps(maxN int) {
	for range w.rng.IntN(maxN + 1) {
		w.step()
	}
}

func (w *world) snapshot() *decide.Snapshot {
	v := decide.NewSnapshot(len(w.alive))
	for _, o := range w.liveOwners() {
		v.AddOwner(o)
		if addr, ok := w.holding[o.UID]; ok && o.Kind == "Pod" {
			v.AddClaim(decide.Claim{Address: addr, Owner: o, Source: "Pod.status.podIPs"})
		}
	}
	return v
}

// inUse returns the live owner using addr, if any.
func (w *world) inUse(addr netip.Addr) (string, bool) {
	for _, uid := range w.alive {
		if at, ok := w.holding[uid]; ok && at == addr {
			return uid, true
		}
	}
	return "", false
}

type raceStats struct {
	passes, released, refused, failed, violations int
	firstViolation                                string
	// releasedKinds counts successful releases by finding kind.
	releasedKinds map[decide.Kind]int
}

// race runs passes of repair against a world that changes between every
// step of a pass: before the view is taken, between the view and the
// listing, between the listing and the releases, and between releases.
func race(seed uint64, passesN int, a *allocator) raceStats {
	w := newWorld(seed, a)
	st := raceStats{releasedKinds: make(map[decide.Kind]int)}
	cfg := config()
	var strikes decide.Strikes
	for range passesN {
		w.steps(3)
		v := w.snapshot()
		w.steps(2) // the view is now stale
		in := decide.Input{
			Now:         w.now,
			Pools:       []decide.Pool{pool("p", "10.1.0.0/28")},
			Allocations: w.alloc.list(),
			Owners:      v,
			Synced:      w.rng.IntN(10) != 0,
			DryRun:      w.rng.IntN(10) == 0,
			Strikes:     strikes,
			Config:      cfg,
		}
		out, err := decide.Decide(in)
		if err != nil {
			panic(err)
		}
		w.steps(3) // between the read and the releases
		results := make(map[decide.AllocationKey]error, len(out.Releases))
		for _, r := range out.Releases {
			w.steps(1)
			if w.rng.IntN(20) == 0 {
				results[r.Key()] = errors.New("allocator unavailable")
				continue
			}
			// Who uses the address at the instant it is freed.
			uid, used := w.inUse(r.Address)
			err := a.guardedRelease(r)
			results[r.Key()] = err
			if err == nil && used {
				st.violations++
				if st.firstViolation == "" {
					st.firstViolation = fmt.Sprintf("pass %d: freed %s while live owner %s uses it", st.passes, r.Address, uid)
				}
				// The owner lost its address; keep the world consistent.
				delete(w.holding, uid)
			}
		}
		if err := out.ApplyReleaseResults(results); err != nil {
			panic(err)
		}
		for _, f := range out.Findings {
			switch f.Action {
			case decide.ActionReleased:
				st.released++
				st.releasedKinds[f.Kind]++
			case decide.ActionReleaseRefused:
				st.refused++
			case decide.ActionReleaseFailed:
				st.failed++
			}
		}
		strikes = out.Strikes
		st.passes++
		w.now = w.now.Add(time.Duration(15+w.rng.IntN(30)) * time.Second)
	}
	return st
}

func TestRaceRandomInterleavings(t *testing.T) {
	const seeds, passesPerSeed = 50, 220 // 11,000 interleavings
	deadline := time.Now().Add(2 * time.Minute)

	t.Run("guarded release never frees an address in use", func(t *testing.T) {
		total := raceStats{releasedKinds: make(map[decide.Kind]int)}
		for seed := uint64(1); seed <= seeds && time.Now().Before(deadline); seed++ {
			st := race(seed, passesPerSeed, newAllocator("10.1.0.0/28"))
			require.Zero(t, st.violations, "seed %d: %s", seed, st.firstViolation)
			total.passes += st.passes
			total.released += st.released
			total.refused += st.refused
			total.failed += st.failed
			for k, n := range st.releasedKinds {
				total.releasedKinds[k] += n
			}
		}
		require.GreaterOrEqual(t, total.passes, 10_000)
		// The run must have exercised every outcome, or it proves
		// nothing.
		require.Positive(t, total.released)
		require.Positive(t, total.refused)
		require.Positive(t, total.failed)
		require.Positive(t, total.releasedKinds[decide.KindLeak])
		require.Positive(t, total.releasedKinds[decide.KindOwnerMismatch])
		t.Logf("%d passes: %d released %v, %d refused, %d failed", total.passes, total.released, total.releasedKinds, total.refused, total.failed)
	})

	// The same schedules catch an allocator that does not guard its
	// release, and one that hands a recreated owner its old record without
	// a new etag: the invariant above holds because of both guards.
	for _, tc := range []struct {
		name string
		make func() *allocator
	}{
		{"the check catches an unguarded release", func() *allocator {
			a := newAllocator("10.1.0.0/28")
			a.unguarded = true
			return a
		}},
		{"the check catches a record handed over without a new etag", func() *allocator {
			a := newAllocator("10.1.0.0/28")
			a.rebind = false
			return a
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			violations := 0
			for seed := uint64(1); seed <= seeds && violations == 0 && time.Now().Before(deadline); seed++ {
				violations += race(seed, passesPerSeed, tc.make()).violations
			}
			require.Positive(t, violations)
		})
	}
}
