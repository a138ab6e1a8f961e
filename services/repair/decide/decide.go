package decide

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Decide judges one pass. It does not modify its input; an error means the
// input could not be judged safely and nothing is decided.
func Decide(in Input) (Output, error) {
	if err := in.Config.Validate(); err != nil {
		return Output{}, err
	}
	if in.Owners == nil && len(in.Allocations) > 0 {
		return Output{}, fmt.Errorf("no owner view: %w", ErrInvalidInput)
	}
	pools, err := indexPools(in.Pools)
	if err != nil {
		return Output{}, err
	}
	p := &pass{
		in:        &in,
		pools:     pools,
		scopes:    make(map[Scope]struct{}, len(in.Config.Resolvable)),
		advancing: in.Synced && !in.DryRun,
	}
	for _, s := range in.Config.Resolvable {
		p.scopes[s] = struct{}{}
	}
	if p.advancing {
		p.next = Strikes{leaks: make(map[AllocationKey]strike), orphans: make(map[string]int),
			deletions: make(map[string]deletionWatch), seen: make(map[findingKey]time.Time)}
	} else {
		p.next = in.Strikes
	}
	p.out = Output{State: StateComplete, DryRun: in.DryRun, Strikes: p.next}
	if !in.Synced {
		p.out.State = StateUnsynced
		p.out.Reason = cmp.Or(in.UnsyncedReason, "view not synced")
	}

	if err := p.scan(); err != nil {
		return Output{}, err
	}
	if err := p.crossPoolDuplicates(); err != nil {
		return Output{}, err
	}
	if err := p.judgeAllocations(); err != nil {
		return Output{}, err
	}
	p.judgeSlices()
	p.judgeDeletions()

	slices.SortFunc(p.out.Findings, compareFindings)
	slices.SortFunc(p.out.Releases, func(a, b Release) int {
		return cmp.Or(strings.Compare(a.Pool, b.Pool), a.Address.Compare(b.Address))
	})
	slices.SortFunc(p.out.SliceDeletes, func(a, b SliceRef) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	slices.SortFunc(p.out.PoolDeletes, func(a, b PoolDelete) int { return strings.Compare(a.Pool, b.Pool) })
	return p.out, nil
}

type poolInfo struct {
	idx   int
	id    string
	cidrs []netip.Prefix
	// foreign are the CIDRs of other pools that overlap this pool's: the
	// only places an in-range allocation can collide with another pool.
	foreign []ownedPrefix
	// deleting pools hand nothing out and their allocations go with
	// them: they are counted, not judged, and no other pool's allocation
	// collides with them.
	deleting bool
}

type ownedPrefix struct {
	prefix netip.Prefix
	pool   string
}

type pools struct {
	byID map[string]*poolInfo
	list []*poolInfo
	all  []ownedPrefix
}

func indexPools(in []Pool) (pools, error) {
	ps := pools{byID: make(map[string]*poolInfo, len(in))}
	for _, p := range in {
		if _, dup := ps.byID[p.ID]; dup {
			return pools{}, fmt.Errorf("pool %q listed twice: %w", p.ID, ErrInvalidInput)
		}
		pi := &poolInfo{idx: len(ps.list), id: p.ID, cidrs: make([]netip.Prefix, 0, len(p.CIDRs)), deleting: p.Deleting}
		for _, c := range p.CIDRs {
			if !c.IsValid() {
				return pools{}, fmt.Errorf("pool %q: invalid CIDR: %w", p.ID, ErrInvalidInput)
			}
			pi.cidrs = append(pi.cidrs, c.Masked())
			if !p.Deleting {
				ps.all = append(ps.all, ownedPrefix{prefix: c.Masked(), pool: p.ID})
			}
		}
		ps.byID[p.ID] = pi
		ps.list = append(ps.list, pi)
	}
	for i, a := range ps.list {
		if a.deleting {
			continue
		}
		for _, b := range ps.list[i+1:] {
			if b.deleting {
				continue
			}
			for _, pa := range a.cidrs {
				for _, pb := range b.cidrs {
					if pa.Overlaps(pb) {
						a.foreign = append(a.foreign, ownedPrefix{prefix: pb, pool: b.id})
						b.foreign = append(b.foreign, ownedPrefix{prefix: pa, pool: a.id})
					}
				}
			}
		}
	}
	return ps, nil
}

// liveness is what the view says of an allocation's owner.
type liveness int

const (
	alive liveness = iota
	unresolved
	gone     // no owner of that identity
	replaced // owners of that identity exist, none with the allocation's uid
)

// record gathers what is wrong with one allocation; only allocations with
// something wrong get one, so the scan of a healthy pool allocates nothing.
type record struct {
	outOfRange bool
	live       liveness
	liveUIDs   []string
	dups       []dup
	// successor is a claim on the address by an owner with the
	// allocation owner's identity and another uid: the recreated owner
	// uses the address.
	successor *Claim
}

type dup struct {
	other     Owner
	otherPool string
	source    string
}

type pass struct {
	in     *Input
	pools  pools
	scopes map[Scope]struct{}
	// What the scan found, merged from its chunks.
	records    map[int]*record
	poolCounts []int          // allocations per pool, by poolInfo.idx
	unknown    map[string]int // allocations per pool not in the pool list
	cross      []int          // allocations inside another pool's CIDRs
	// strays are out-of-range addresses inside another pool's CIDRs; that
	// pool's allocation of the address need not overlap anything.
	strays    []netip.Addr
	advancing bool
	next      Strikes
	out       Output
	// candidates index the leak findings past their strikes and grace,
	// waiting for the per-pool release limit.
	candidates []int
}

func (p *pass) record(i int) *record {
	return recordIn(p.records, i)
}

func recordIn(m map[int]*record, i int) *record {
	r, ok := m[i]
	if !ok {
		r = &record{}
		m[i] = r
	}
	return r
}

// chunk is the scan of one contiguous range of the allocations.
type chunk struct {
	records    map[int]*record
	poolCounts []int
	unknown    map[string]int
	cross      []int
	strays     []netip.Addr
	unresolved int
	inDeletion int
	err        error
}

// minChunk is the fewest allocations worth a goroutine of their own (a
// variable so tests can split small inputs).
var minChunk = 1 << 16

// scan looks at every allocation once. Large inputs are split into
// contiguous chunks scanned in parallel and merged in order, so the result
// does not depend on the split; the view is read concurrently then.
func (p *pass) scan() error {
	n := len(p.in.Allocations)
	p.out.Stats.Allocations = n
	workers := max(1, min(runtime.GOMAXPROCS(0), n/minChunk))
	chunks := make([]chunk, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := n*w/workers, n*(w+1)/workers
		wg.Go(func() { p.scanRange(&chunks[w], lo, hi) })
	}
	wg.Wait()

	p.poolCounts = make([]int, len(p.pools.list))
	p.unknown = make(map[string]int)
	p.records = chunks[0].records
	for w := range chunks {
		c := &chunks[w]
		if c.err != nil {
			return c.err
		}
		if w > 0 {
			maps.Copy(p.records, c.records)
		}
		for i, k := range c.poolCounts {
			p.poolCounts[i] += k
		}
		for pool, k := range c.unknown {
			p.unknown[pool] += k
		}
		p.cross = append(p.cross, c.cross...)
		p.strays = append(p.strays, c.strays...)
		p.out.Stats.Unresolved += c.unresolved
		p.out.Stats.InDeletion += c.inDeletion
	}
	return nil
}

// scanRange scans the allocations [lo, hi) into c.
func (p *pass) scanRange(c *chunk, lo, hi int) {
	c.records = make(map[int]*record)
	c.poolCounts = make([]int, len(p.pools.list))
	c.unknown = make(map[string]int)
	for i := lo; i < hi; i++ {
		a := &p.in.Allocations[i]
		if c.err = checkAllocation(i, a); c.err != nil {
			return
		}
		if p.scanPool(c, i, a) {
			continue
		}
		selfUse, successor := p.scanClaims(c, i, a)
		p.scanOwner(c, i, a, selfUse, successor)
	}
}

// checkAllocation refuses an allocation that could not be judged or
// released safely.
func checkAllocation(i int, a *Allocation) error {
	if !a.Address.IsValid() || a.Address.Zone() != "" {
		return fmt.Errorf("allocation %d in pool %q: invalid address: %w", i, a.Pool, ErrInvalidInput)
	}
	if a.Etag == "" {
		// Without an etag a release could not be guarded.
		return fmt.Errorf("allocation %s in pool %q: no etag: %w", a.Address, a.Pool, ErrInvalidInput)
	}
	return nil
}

// scanPool counts allocation i in its pool and records whether its
// address is out of the pool's range or inside another pool's. It reports
// whether the pool is being deleted: such allocations are judged no
// further.
func (p *pass) scanPool(c *chunk, i int, a *Allocation) (deleting bool) {
	pi := p.pools.byID[a.Pool]
	if pi == nil {
		// A pool created after the pools were listed: its range
		// cannot be judged, but its allocations still count.
		c.unknown[a.Pool]++
		return false
	}
	c.poolCounts[pi.idx]++
	if pi.deleting {
		c.inDeletion++
		return true
	}
	if !containedIn(a.Address, pi.cidrs) {
		recordIn(c.records, i).outOfRange = true
		if inOther(a.Address, a.Pool, p.pools.all) {
			c.cross = append(c.cross, i)
			c.strays = append(c.strays, a.Address)
		}
	} else if len(pi.foreign) > 0 && inOther(a.Address, a.Pool, pi.foreign) {
		c.cross = append(c.cross, i)
	}
	return false
}

// scanClaims records the other owners that claim allocation i's address
// as duplicates. It reports whether the owner itself uses the address,
// and the claim of another incarnation of the owner (same identity, other
// uid), if any.
func (p *pass) scanClaims(c *chunk, i int, a *Allocation) (selfUse bool, successor *Claim) {
	claims := p.in.Owners.Claims(a.Address)
	for ci := range claims {
		cl := &claims[ci]
		switch {
		case same(cl.Owner, a.Owner):
			selfUse = true
		case cl.Owner.Identity() == a.Owner.Identity():
			successor = cl
		default:
			r := recordIn(c.records, i)
			r.dups = append(r.dups, dup{other: cl.Owner, source: cl.Source})
		}
	}
	return selfUse, successor
}

// scanOwner judges whether allocation i's owner is alive, gone, replaced
// by another incarnation, or out of the view's scope, and records it.
func (p *pass) scanOwner(c *chunk, i int, a *Allocation, selfUse bool, successor *Claim) {
	live := alive
	var uids []string
	if _, ok := p.scopes[Scope{Kind: a.Owner.Kind, Cluster: a.Owner.Cluster}]; !ok {
		c.unresolved++
		live = unresolved
	} else if !selfUse {
		uids = p.in.Owners.UIDs(a.Owner.Identity())
		switch {
		case isAlive(a.Owner.UID, uids):
		case len(uids) == 0 && successor == nil:
			live = gone
		default:
			live = replaced
		}
	}
	if successor != nil && live != replaced {
		// Another incarnation claims the address while this one is
		// alive or cannot be judged: two owners, one address.
		r := recordIn(c.records, i)
		r.dups = append(r.dups, dup{other: successor.Owner, source: successor.Source})
		successor = nil
	}
	if live == alive || live == unresolved {
		if r, ok := c.records[i]; ok {
			r.live = live
		}
		return
	}
	r := recordIn(c.records, i)
	r.live, r.liveUIDs, r.successor = live, uids, successor
}

func isAlive(uid string, live []string) bool {
	for _, u := range live {
		if u == "" || uid == "" || u == uid {
			return true
		}
	}
	return false
}

func containedIn(addr netip.Addr, cidrs []netip.Prefix) bool {
	for _, c := range cidrs {
		if c.Contains(addr) {
			return true
		}
	}
	return false
}

func inOther(addr netip.Addr, pool string, prefixes []ownedPrefix) bool {
	for _, op := range prefixes {
		if op.pool != pool && op.prefix.Contains(addr) {
			return true
		}
	}
	return false
}

// crossPoolDuplicates finds addresses allocated in more than one pool to
// different owners, among the allocations that lie in another pool's range.
func (p *pass) crossPoolDuplicates() error {
	allocs := p.in.Allocations
	if len(p.strays) > 0 {
		// Rare (a forced shrink whose range another pool took over), so
		// one more look at every allocation is affordable.
		stray := make(map[netip.Addr]bool, len(p.strays))
		for _, a := range p.strays {
			stray[a] = true
		}
		had := make(map[int]bool, len(p.cross))
		for _, i := range p.cross {
			had[i] = true
		}
		for i := range allocs {
			if stray[allocs[i].Address] && !had[i] {
				p.cross = append(p.cross, i)
			}
		}
	}
	slices.SortFunc(p.cross, func(i, j int) int {
		return cmp.Or(allocs[i].Address.Compare(allocs[j].Address), strings.Compare(allocs[i].Pool, allocs[j].Pool))
	})
	for start := 0; start < len(p.cross); {
		end := start + 1
		for end < len(p.cross) && allocs[p.cross[end]].Address == allocs[p.cross[start]].Address {
			end++
		}
		group := p.cross[start:end]
		for gi, i := range group {
			if gi > 0 && allocs[group[gi-1]].Pool == allocs[i].Pool {
				return fmt.Errorf("allocation %s in pool %q listed twice: %w", allocs[i].Address, allocs[i].Pool, ErrInvalidInput)
			}
			for _, j := range group {
				if i != j && !same(allocs[i].Owner, allocs[j].Owner) {
					r := p.record(i)
					r.dups = append(r.dups, dup{other: allocs[j].Owner, otherPool: allocs[j].Pool, source: "allocation in pool " + allocs[j].Pool})
				}
			}
		}
		start = end
	}
	return nil
}

func (p *pass) poolCount(pool string) int {
	if pi := p.pools.byID[pool]; pi != nil {
		return p.poolCounts[pi.idx]
	}
	return p.unknown[pool]
}

// firstSeen returns when the finding was first seen and carries it to the
// next pass.
func (p *pass) firstSeen(f *Finding) time.Time {
	k := keyOf(f)
	t, ok := p.in.Strikes.seen[k]
	if !ok {
		t = p.in.Now
	}
	if p.advancing {
		p.next.seen[k] = t
	}
	return t
}

func (p *pass) add(f Finding) int {
	p.out.Findings = append(p.out.Findings, f)
	return len(p.out.Findings) - 1
}

func (p *pass) judgeAllocations() error {
	idx := make([]int, 0, len(p.records))
	for i := range p.records {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		r := p.records[i]
		a := &p.in.Allocations[i]
		base := Finding{Pool: a.Pool, Address: a.Address, Owner: a.Owner, Etag: a.Etag, Action: ActionReported}
		if r.outOfRange {
			f := base
			f.Kind = KindOutOfRange
			f.Message = fmt.Sprintf("%s is outside every CIDR of pool %s; not released automatically", a.Address, a.Pool)
			f.FirstSeen = p.firstSeen(&f)
			p.add(f)
		}
		for _, d := range r.dups {
			f := base
			f.Kind = KindDuplicate
			f.Other, f.OtherPool = d.other, d.otherPool
			f.Message = fmt.Sprintf("%s is allocated to %s and also claimed by %s (%s); not released automatically", a.Address, a.Owner, d.other, d.source)
			f.FirstSeen = p.firstSeen(&f)
			p.add(f)
		}
		switch r.live {
		case alive, unresolved:
			continue
		}
		if r.successor != nil {
			f := base
			f.Kind = KindOwnerMismatch
			f.Message = fmt.Sprintf("allocation names %s, but the recreated owner (uid %s) uses %s (%s); not a leak, the allocation should be re-bound to the new uid",
				a.Owner, r.successor.Owner.UID, a.Address, r.successor.Source)
			f.FirstSeen = p.firstSeen(&f)
			p.add(f)
			continue
		}
		if err := p.leakCandidate(a, r, base); err != nil {
			return err
		}
	}
	p.limitReleases()
	return nil
}

func (p *pass) leakCandidate(a *Allocation, r *record, f Finding) error {
	key := a.Key()
	prev, seenBefore := p.in.Strikes.leaks[key]
	st := strike{count: prev.count, firstSeen: prev.firstSeen}
	if !seenBefore {
		st.firstSeen = p.in.Now
	}
	if p.in.Synced {
		st.count++ // a dry run shows the count a real pass would reach
	}
	if p.advancing {
		if _, dupKey := p.next.leaks[key]; dupKey {
			return fmt.Errorf("allocation %s listed twice: %w", key, ErrInvalidInput)
		}
		p.next.leaks[key] = st
	}
	f.Strikes, f.FirstSeen = st.count, st.firstSeen

	var what string
	if r.live == gone {
		f.Kind = KindLeak
		what = fmt.Sprintf("owner %s no longer exists", a.Owner)
	} else {
		f.Kind = KindOwnerMismatch
		what = fmt.Sprintf("owner %s was recreated (now uid %s); the allocation of the old uid is a leak candidate",
			a.Owner, strings.Join(r.liveUIDs, ", "))
	}
	age := p.in.Now.Sub(a.CreateTime)
	cfg := p.in.Config
	switch {
	case !p.in.Synced:
		f.Action = ActionReported
		f.Message = fmt.Sprintf("%s; not acted on: view incomplete: %s", what, p.out.Reason)
	case r.outOfRange || len(r.dups) > 0:
		f.Action = ActionReported
		f.Message = fmt.Sprintf("%s; not released: the address is %s", what, blockReason(r))
	case cfg.ClusterBound && a.Owner.Cluster == "":
		f.Action = ActionReported
		f.Message = what + "; " + leftToFleet
	case st.count < cfg.LeakStrikes:
		f.Action = ActionWaitingStrikes
		f.Message = fmt.Sprintf("%s; seen in %d of %d consecutive passes", what, st.count, cfg.LeakStrikes)
	case age <= cfg.LeakGrace:
		f.Action = ActionWaitingGrace
		f.Message = fmt.Sprintf("%s; allocation is %s old, grace is %s", what, age.Round(time.Second), cfg.LeakGrace)
	default:
		f.Message = what
		p.candidates = append(p.candidates, p.add(f))
		return nil
	}
	p.add(f)
	return nil
}

// leftToFleet says why a repair bound to its cluster acts on nothing of
// the fleet's.
const leftToFleet = "left to a repair with fleet rights: this repair's identity is bound to its cluster"

func blockReason(r *record) string {
	switch {
	case r.outOfRange && len(r.dups) > 0:
		return "out of range and claimed by another owner"
	case r.outOfRange:
		return "out of range"
	default:
		return "claimed by another owner"
	}
}

// limitReleases turns the candidates into releases, at most the pool's
// limit per pool, in address order.
func (p *pass) limitReleases() {
	fs := p.out.Findings
	slices.SortFunc(p.candidates, func(i, j int) int {
		return cmp.Or(strings.Compare(fs[i].Pool, fs[j].Pool), fs[i].Address.Compare(fs[j].Address))
	})
	used := 0
	for n, i := range p.candidates {
		f := &fs[i]
		if n == 0 || fs[p.candidates[n-1]].Pool != f.Pool {
			used = 0
		}
		limit := p.in.Config.releaseLimit(p.poolCount(f.Pool))
		if used >= limit {
			f.Action = ActionLimited
			f.Message += fmt.Sprintf("; pool %s may release %d of %d allocations per pass", f.Pool, limit, p.poolCount(f.Pool))
			continue
		}
		used++
		if p.in.DryRun {
			f.Action = ActionDryRun
			f.Message += "; would be released (dry run)"
			continue
		}
		f.Action = ActionRelease
		f.Message += fmt.Sprintf("; releasing with etag %s and owner uid %q", f.Etag, f.Owner.UID)
		p.out.Releases = append(p.out.Releases, Release{Pool: f.Pool, Address: f.Address, Etag: f.Etag, OwnerUID: f.Owner.UID, Owner: f.Owner})
	}
}

func (p *pass) judgeSlices() {
	for _, s := range p.in.Slices {
		if s.ManagedBy != ImporterManagedBy {
			continue
		}
		p.out.Stats.Slices++
		if s.ImportExists || s.ServiceExists {
			continue
		}
		ref := SliceRef{Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion, ServiceName: s.ServiceName}
		f := Finding{Kind: KindOrphanedSlice, Slice: ref}
		f.FirstSeen = p.firstSeen(&f)
		f.Strikes = p.in.Strikes.orphans[s.UID]
		if p.in.Synced {
			f.Strikes++ // a dry run shows the count a real pass would reach
		}
		if p.advancing {
			p.next.orphans[s.UID] = f.Strikes
		}
		if p.deletion(&f, deletionSteps{
			what: fmt.Sprintf("EndpointSlice %s/%s: ServiceImport and Service %q are gone", s.Namespace, s.Name, s.ServiceName),
			seen: "seen in", age: p.in.Now.Sub(s.CreateTime), aged: "slice is %s old",
			doing: "deleting", wouldDo: "would be deleted",
		}) {
			p.out.SliceDeletes = append(p.out.SliceDeletes, ref)
		}
		p.add(f)
	}
}

// deletionSteps says how a finding that leads to a deletion reads at each
// of the rules it waits for.
type deletionSteps struct {
	what string // the finding
	seen string // the strikes: "<seen> 2 of 3 consecutive passes"
	// age is what the grace is held against, and aged says it in words,
	// with a %s for it ("slice is %s old").
	age  time.Duration
	aged string
	// doing is what a pass does when the rules are met, wouldDo what a
	// dry run would.
	doing, wouldDo string
}

// deletion applies to f the rules a deletion waits for: a complete view,
// Config.LeakStrikes strikes, Config.LeakGrace, not a dry run; it sets
// f's action and message, and reports whether to delete now.
func (p *pass) deletion(f *Finding, s deletionSteps) bool {
	switch {
	case !p.in.Synced:
		f.Action = ActionReported
		f.Message = fmt.Sprintf("%s; not acted on: view incomplete: %s", s.what, p.out.Reason)
	case f.Strikes < p.in.Config.LeakStrikes:
		f.Action = ActionWaitingStrikes
		f.Message = fmt.Sprintf("%s; %s %d of %d consecutive passes", s.what, s.seen, f.Strikes, p.in.Config.LeakStrikes)
	case s.age <= p.in.Config.LeakGrace:
		f.Action = ActionWaitingGrace
		f.Message = fmt.Sprintf("%s; "+s.aged+", grace is %s", s.what, s.age.Round(time.Second), p.in.Config.LeakGrace)
	case p.in.DryRun:
		f.Action = ActionDryRun
		f.Message = s.what + "; " + s.wouldDo + " (dry run)"
	default:
		f.Action = ActionDelete
		f.Message = s.what + "; " + s.doing
		return true
	}
	return false
}

func kindRank(k Kind) int {
	return slices.Index(Kinds, k)
}

func compareFindings(a, b Finding) int {
	return cmp.Or(
		strings.Compare(a.Pool, b.Pool),
		a.Address.Compare(b.Address),
		cmp.Compare(kindRank(a.Kind), kindRank(b.Kind)),
		strings.Compare(a.Etag, b.Etag),
		strings.Compare(a.OtherPool, b.OtherPool),
		strings.Compare(a.Other.String(), b.Other.String()),
		strings.Compare(a.Slice.Namespace, b.Slice.Namespace),
		strings.Compare(a.Slice.Name, b.Slice.Name),
		strings.Compare(a.Slice.UID, b.Slice.UID),
	)
}
