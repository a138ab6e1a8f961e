package allocation

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// snapshotReuse is how long a store snapshot taken for watches serves
// further watches. A watch started from an older snapshot replays the
// changes since from the store's history, so reuse costs a few events,
// while taking a snapshot decodes the whole store.
const snapshotReuse = 2 * time.Second

// snapshotTimeout bounds one snapshot, which no single watch owns.
const snapshotTimeout = 2 * time.Minute

// poolSnapshot is a store snapshot, with each pool's allocations picked
// out once, when a watch of the pool first asks.
type poolSnapshot struct {
	rev int64
	all []store.Allocation

	mu     sync.Mutex
	byPool map[string][]store.Allocation
}

func (p *poolSnapshot) of(pool string) []store.Allocation {
	if pool == "-" {
		return p.all
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if got, ok := p.byPool[pool]; ok {
		return got
	}
	var got []store.Allocation
	for _, a := range p.all {
		if a.Pool == pool {
			got = append(got, a)
		}
	}
	p.byPool[pool] = got
	return got
}

// snapshotCall is one snapshot, shared by the watches that wait for it.
type snapshotCall struct {
	done chan struct{}
	snap *poolSnapshot
	err  error
}

// snapshots shares store snapshots among the watches that start while one
// is being taken or was taken less than snapshotReuse ago: 2,000 watches
// started together decode the store once, not 2,000 times, and pick their
// pool's allocations out of it once per pool. The snapshot
// is dropped snapshotReuse after it was taken (the watches still sending
// it keep what they hold).
type snapshots struct {
	mu  sync.Mutex
	cur *snapshotCall
}

// get returns a recent snapshot, or takes one. A watch that gives up
// (ctx) does not stop the snapshot the others wait for. fresh forces a new
// one (the store no longer has the history after the last).
func (sn *snapshots) get(ctx context.Context, st store.Store, fresh bool) (*poolSnapshot, error) {
	sn.mu.Lock()
	c := sn.cur
	if c == nil || fresh {
		c = &snapshotCall{done: make(chan struct{})}
		sn.cur = c
		go sn.take(st, c)
	}
	sn.mu.Unlock()
	select {
	case <-c.done:
		return c.snap, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (sn *snapshots) take(st store.Store, c *snapshotCall) {
	ctx, cancel := context.WithTimeout(context.Background(), snapshotTimeout)
	defer cancel()
	snap, err := st.Snapshot(ctx)
	if err != nil {
		c.err = fmt.Errorf("watch snapshot: %w", err)
	} else {
		c.snap = &poolSnapshot{rev: snap.Revision, all: snap.Allocations, byPool: map[string][]store.Allocation{}}
	}
	close(c.done)
	forget := func() {
		sn.mu.Lock()
		if sn.cur == c {
			sn.cur = nil
		}
		sn.mu.Unlock()
	}
	if c.err != nil {
		forget() // the next watch tries again
		return
	}
	time.AfterFunc(snapshotReuse, forget)
}
