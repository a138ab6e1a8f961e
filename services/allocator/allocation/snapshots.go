package allocation

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/held"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// snapshotReuse is how long a snapshot taken for watches serves further
// watches. A watch started from an older snapshot replays the changes
// since from the store's history, so reuse costs a few events, while
// taking a snapshot decodes the whole store, or closes the pool to
// commits for a moment. A variable for tests.
var snapshotReuse = 2 * time.Second

// snapshotTimeout bounds one snapshot, which no single watch owns.
const snapshotTimeout = 2 * time.Minute

// ChunkSize is the most allocations a SnapshotChunk holds.
const ChunkSize = 512

// SnapshotChunk is a run of consecutive allocations of a watch snapshot.
// The watches that send one snapshot share its chunks, and what an
// adapter makes of a chunk (its encoding) through Memo: 2,000 watches of
// a pool decode and encode each allocation once, not 2,000 times.
type SnapshotChunk struct {
	// Allocations are in (pool, address) order. Read-only.
	Allocations []store.Allocation

	mu   sync.Mutex
	memo map[any]any
}

// Memo returns build(c.Allocations), made once per key for every watch
// that shares the chunk; those asking meanwhile wait for it.
func (c *SnapshotChunk) Memo(key any, build func([]store.Allocation) any) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.memo[key]; ok {
		return v
	}
	v := build(c.Allocations)
	if c.memo == nil {
		c.memo = map[any]any{}
	}
	c.memo[key] = v
	return v
}

// poolSnapshot is what a watch sends before its changes: views of held
// allocations (one pool's, or every pool's in id order); or the store read
// at one revision (one pool's or every pool's), a run of chunks at a time. Each is cut into chunks as
// the first watch to get that far asks. The
// snapshot holds its chunks weakly: the watches sending a chunk keep it
// (and its encodings) alive, and one the collector took is cut again
// when a later watch gets there, so a snapshot of a million allocations
// holds a few chunks at a time, not a copy of the pool.
type poolSnapshot struct {
	rev int64
	// views are set for a snapshot taken from memory: one pool's, or the
	// non-empty pools' in id order.
	views []*held.View
	// pages is set for a snapshot read from the store at rev, of
	// pagePool ("": every pool).
	pages    store.Store
	pagePool string
	// compacted is set once a page of rev was found compacted: the
	// snapshot serves no new watch.
	compacted atomic.Bool

	mu     sync.Mutex
	chunks map[string]*chunked
}

// pageChunks is how many chunks a snapshot read from the store reads at a
// time: the store's own pages' order of size. A run trades round trips
// against what the snapshot holds; what etcd walks to answer is about
// what it returns whatever the run (the etcd store bounds its reads by
// windows of addresses; before, a read per chunk cost etcd a walk of the
// rest of the range each).
const pageChunks = 8

// chunked is a snapshot's chunks of one pool ("-": all), cut so far.
type chunked struct {
	list []weak.Pointer[SnapshotChunk]
	// starts[i] is where chunk i starts, and one more: where the next
	// chunk to cut starts, until done.
	starts []place
	done   bool
	// last are the chunks of the latest run read, held until the next,
	// so that the collector does not take those a watch has yet to get
	// to (a run of pages is read for the chunks after the one asked for).
	last []*SnapshotChunk
}

// place is a position in a snapshot's views, or its pages.
type place struct {
	view int
	addr netip.Addr // the zero Addr: the view's first
	// after is, in pages, the last allocation before the place.
	after store.AllocationKey
}

// cut reads the run that starts at from: of up to chunks chunks from the
// pages, of one chunk from the views; and where the next run starts; more
// is false when this one ends them.
func (p *poolSnapshot) cut(ctx context.Context, from place, chunks int) (out []store.Allocation, next place, more bool, err error) {
	if p.pages != nil {
		pg, next, more, err := p.page(ctx, p.rev, from, chunks)
		return pg.Allocations, next, more, err
	}
	out = make([]store.Allocation, 0, ChunkSize)
	for v := from.view; v < len(p.views); v++ {
		start := netip.Addr{}
		if v == from.view {
			start = from.addr
		}
		p.views[v].Ascend(start, func(a store.Allocation) bool {
			out = append(out, a)
			return len(out) < ChunkSize
		})
		if len(out) == ChunkSize {
			if n := out[len(out)-1].Address.Next(); n.IsValid() {
				return out, place{view: v, addr: n}, true, nil
			}
			// The family's last address.
			return out, place{view: v + 1}, v+1 < len(p.views), nil
		}
	}
	return out, place{}, false, nil
}

// page reads a run of up to chunks chunks from the store at rev (0: the
// current revision), and where the next starts.
func (p *poolSnapshot) page(ctx context.Context, rev int64, from place, chunks int) (pg store.Page, next place, more bool, err error) {
	pg, err = p.pages.PageAllocations(ctx, rev, p.pagePool, from.after, chunks*ChunkSize)
	if err != nil {
		return store.Page{}, place{}, false, err
	}
	if n := len(pg.Allocations); n > 0 {
		next.after = keyOf(pg.Allocations[n-1])
	}
	return pg, next, pg.More && len(pg.Allocations) > 0, nil
}

func keyOf(a store.Allocation) store.AllocationKey {
	return store.AllocationKey{Pool: a.Pool, Address: a.Address}
}

// pieces cuts a run into chunks: ChunkSize allocations each, the last
// maybe fewer.
func pieces(run []store.Allocation) []*SnapshotChunk {
	out := make([]*SnapshotChunk, 0, (len(run)+ChunkSize-1)/ChunkSize)
	for len(run) > 0 {
		n := min(len(run), ChunkSize)
		out = append(out, &SnapshotChunk{Allocations: run[:n:n]})
		run = run[n:]
	}
	return out
}

// add appends the chunks of run, read from the place of the next chunk
// to cut, and where the run after it starts (more) or that it was the
// last.
func (c *chunked) add(run []store.Allocation, next place, more bool) {
	c.last = pieces(run)
	for k, ch := range c.last {
		c.list = append(c.list, weak.Make(ch))
		if k < len(c.last)-1 {
			// Within a run, only pages hold more than one chunk.
			c.starts = append(c.starts, place{after: keyOf(ch.Allocations[len(ch.Allocations)-1])})
		}
	}
	if more && len(c.last) > 0 {
		c.starts = append(c.starts, next)
		return
	}
	c.starts, c.done = c.starts[:len(c.list)], true
}

// chunk returns the snapshot's i-th chunk of pool, or false past the
// last. Only reading a page can fail; ctx bounds it.
func (p *poolSnapshot) chunk(ctx context.Context, pool string, i int) (*SnapshotChunk, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.chunks == nil {
		p.chunks = map[string]*chunked{}
	}
	c := p.chunks[pool]
	if c == nil {
		c = &chunked{starts: []place{{}}}
		p.chunks[pool] = c
	}
	for len(c.list) <= i && !c.done {
		run, next, more, err := p.cut(ctx, c.starts[len(c.list)], pageChunks)
		if err != nil {
			return nil, false, p.failed(err)
		}
		c.add(run, next, more)
	}
	if i >= len(c.list) {
		return nil, false, nil
	}
	if ch := c.list[i].Value(); ch != nil {
		return ch, true, nil
	}
	// Collected: cut again.
	// With the chunks after it, up to a run: every chunk but the last
	// holds ChunkSize allocations, so the run's pieces are those chunks.
	run, _, _, err := p.cut(ctx, c.starts[i], min(pageChunks, len(c.list)-i))
	if err != nil {
		return nil, false, p.failed(err)
	}
	c.last = c.last[:0]
	for k, ch := range pieces(run) {
		if i+k >= len(c.list) {
			break
		}
		if held := c.list[i+k].Value(); held != nil {
			ch = held
		} else {
			c.list[i+k] = weak.Make(ch)
		}
		c.last = append(c.last, ch)
	}
	if len(c.last) == 0 {
		return nil, false, fmt.Errorf("watch snapshot at revision %d: chunk %d read again came back empty", p.rev, i)
	}
	return c.last[0], true, nil
}

// failed notes a page that could not be read, and returns err.
func (p *poolSnapshot) failed(err error) error {
	if errors.Is(err, store.ErrCompacted) {
		p.compacted.Store(true)
	}
	return err
}

// snapshotCall is one snapshot, shared by the watches that wait for it.
type snapshotCall struct {
	done chan struct{}
	snap *poolSnapshot
	err  error
	// from is the store's revision when the snapshot was asked for: the
	// snapshot, taken after, is at least as new.
	from int64
}

// finished reports whether the call's snapshot has been taken.
func (c *snapshotCall) finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stale reports whether the call's snapshot can no longer be read whole:
// the store compacted its revision while it was being sent.
func (c *snapshotCall) stale() bool {
	return c.finished() && c.snap != nil && c.snap.compacted.Load()
}

// covers reports whether the call's snapshot is at least at revision
// atLeast: taken, at that revision or later; or being taken, asked for
// when the store was there already.
func (c *snapshotCall) covers(atLeast int64) bool {
	if c.finished() {
		return c.err == nil && c.snap.rev >= atLeast
	}
	return c.from >= atLeast
}

// snapshots shares snapshots among the watches that start while one is
// being taken or was taken less than snapshotReuse ago: 2,000 watches
// started together take one, not 2,000. A watch shares only a snapshot at
// least as new as the store was when it began (atLeast), so what it
// receives up to SYNCED holds every commit acknowledged before its call;
// under a steady stream of commits the watches that arrive while one
// snapshot is taken share the next. A snapshot is dropped snapshotReuse
// after it was taken (the watches still sending it keep what they hold).
// Snapshots are kept by key: one for the whole store, and one per pool
// (taken from memory, or on a follower read from the store).
type snapshots struct {
	mu    sync.Mutex
	calls map[string]*snapshotCall
}

// get returns a recent snapshot of key at revision atLeast or later, or
// takes one with take. A watch that gives up (ctx) does not stop the
// snapshot the others wait for. fresh forces a new one (the store no
// longer has the history after the last).
func (sn *snapshots) get(ctx context.Context, key string, atLeast int64, fresh bool, take func(context.Context) (*poolSnapshot, error)) (*poolSnapshot, error) {
	for {
		sn.mu.Lock()
		c := sn.calls[key]
		behind := c != nil && !c.finished() && !c.covers(atLeast)
		if !behind && (c == nil || fresh || c.stale() || !c.covers(atLeast)) {
			c = &snapshotCall{done: make(chan struct{}), from: atLeast}
			if sn.calls == nil {
				sn.calls = map[string]*snapshotCall{}
			}
			sn.calls[key] = c
			go sn.take(key, c, take, snapshotReuse)
		}
		sn.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if !behind {
			return c.snap, c.err
		}
		// The snapshot being taken was asked for before a commit this
		// watch must see: once it is in, share the next.
		fresh = false
	}
}

func (sn *snapshots) take(key string, c *snapshotCall, take func(context.Context) (*poolSnapshot, error), reuse time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), snapshotTimeout)
	defer cancel()
	c.snap, c.err = take(ctx)
	close(c.done)
	forget := func() {
		sn.mu.Lock()
		if sn.calls[key] == c {
			delete(sn.calls, key)
		}
		sn.mu.Unlock()
	}
	if c.err != nil {
		forget() // the next watch tries again
		return
	}
	time.AfterFunc(reuse, forget)
}

// pagedSnapshot reads pool's allocations ("-": every pool's) from the
// store a chunk at a time, at the revision of the first: what a follower
// does, whose held state is not exact at any one revision (see
// heldSnapshot), holding a run of pages, not all of them, while the
// snapshot is sent. A watch that gets to a chunk after the store
// compacted the revision ends (ErrRevisionTooOld) and starts again.
func pagedSnapshot(pages store.Store, pool string) func(context.Context) (*poolSnapshot, error) {
	return func(ctx context.Context) (*poolSnapshot, error) {
		of := pool
		if pool == "-" {
			of = ""
		}
		p := &poolSnapshot{pages: pages, pagePool: of}
		pg, next, more, err := p.page(ctx, 0, place{}, pageChunks)
		if err != nil {
			return nil, fmt.Errorf("watch snapshot of pool %s: %w: %w", pool, decide.ErrStoreUnavailable, err)
		}
		p.rev = pg.Revision
		c := &chunked{starts: []place{{}}}
		c.add(pg.Allocations, next, more)
		p.chunks = map[string]*chunked{pool: c}
		return p, nil
	}
}

// heldSnapshot takes pool's allocations from memory, with no store read:
// a view of held, at a moment when no commit of the pool is between the
// store and held, and the revision of this allocator's latest commit.
// Only an allocator alone on its store can: every commit is its own, and
// the latest it made is at least every commit of the pool, and below
// every later one. A follower installs its own commits before the
// commits of other replicas that precede them, so its held is not the
// state at any one revision; it decodes the store.
func (s *Allocator) heldSnapshot(pool string) func(context.Context) (*poolSnapshot, error) {
	return func(ctx context.Context) (*poolSnapshot, error) {
		ps, err := s.pool(pool)
		if err != nil {
			return nil, err
		}
		ps.mu.Lock()
		defer ps.mu.Unlock()
		if err := ps.gate.quiesce(ctx, &ps.mu); err != nil {
			return nil, fmt.Errorf("watch snapshot of pool %s: %w", pool, err)
		}
		defer ps.gate.open()
		if ps.deleted {
			return nil, fmt.Errorf("pool %q: %w", pool, decide.ErrPoolNotFound)
		}
		return &poolSnapshot{rev: s.followed.load(), views: []*held.View{ps.held.Snapshot()}}, nil
	}
}

// heldSnapshotAll takes every pool's allocations from memory, with no
// store read, at one revision, on the same grounds as heldSnapshot: pool
// changes wait (s.mu), every pool's gate is shut first, so that no commit
// starts anywhere, then each pool's view is taken once its commits in
// flight are in, and the gates open again. Commits wait for about one
// store commit, not one per pool.
func (s *Allocator) heldSnapshotAll() func(context.Context) (*poolSnapshot, error) {
	return func(ctx context.Context) (*poolSnapshot, error) {
		s.mu.RLock()
		defer s.mu.RUnlock()
		ids := slices.Sorted(maps.Keys(s.pools))
		shut := make([]*poolState, 0, len(ids))
		defer func() {
			for _, ps := range shut {
				ps.mu.Lock()
				ps.gate.open()
				ps.mu.Unlock()
			}
		}()
		// In id order, as every snapshot of all pools shuts them: two
		// never wait for each other's gates.
		for _, id := range ids {
			ps := s.pools[id]
			ps.mu.Lock()
			err := ps.gate.shut(ctx, &ps.mu)
			ps.mu.Unlock()
			if err != nil {
				return nil, fmt.Errorf("watch snapshot of every pool: %w", err)
			}
			shut = append(shut, ps)
		}
		views := make([]*held.View, 0, len(ids))
		for i, ps := range shut {
			ps.mu.Lock()
			if err := ps.gate.drain(ctx, &ps.mu); err != nil {
				// drain opened this gate; the rest are still shut.
				ps.mu.Unlock()
				shut = slices.Delete(shut, i, i+1)
				return nil, fmt.Errorf("watch snapshot of every pool: %w", err)
			}
			if ps.held.Len() > 0 {
				views = append(views, ps.held.Snapshot())
			}
			ps.mu.Unlock()
		}
		return &poolSnapshot{rev: s.followed.load(), views: views}, nil
	}
}
