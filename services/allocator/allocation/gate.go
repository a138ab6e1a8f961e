package allocation

import (
	"context"
	"sync"
)

// gate counts a pool's commits in flight: from the unlock before a
// commit to the relock that installs its result in held. A watch
// snapshot of the pool needs none in flight, for held is then exactly the
// store's state of the pool: it closes the gate so that no new one
// starts, waits for those in flight, takes its view, and opens the gate
// again. Every method is called with the pool's lock held (mu); pass and
// quiesce unlock it while they wait.
type gate struct {
	inFlight int
	// closed is non-nil while the gate is closed, and closed when it
	// opens; drained is closed when inFlight reaches 0.
	closed, drained chan struct{}
}

// pass waits until the gate is open.
func (g *gate) pass(ctx context.Context, mu *sync.Mutex) error {
	for g.closed != nil {
		c := g.closed
		mu.Unlock()
		select {
		case <-c:
			mu.Lock()
		case <-ctx.Done():
			mu.Lock()
			return ctx.Err()
		}
	}
	return nil
}

// enter counts a commit that is about to start; leave, one whose result
// is installed (or dropped).
func (g *gate) enter() { g.inFlight++ }

func (g *gate) leave() {
	g.inFlight--
	if g.inFlight == 0 && g.drained != nil {
		close(g.drained)
		g.drained = nil
	}
}

// quiesce closes the gate and waits until no commit is in flight. On
// success the caller opens the gate again (open) once it has what it
// needs; on error the gate is open.
func (g *gate) quiesce(ctx context.Context, mu *sync.Mutex) error {
	if err := g.shut(ctx, mu); err != nil {
		return err
	}
	return g.drain(ctx, mu)
}

// shut closes the gate, once no one else holds it closed: no commit
// starts until it opens. On error the gate is as it was.
func (g *gate) shut(ctx context.Context, mu *sync.Mutex) error {
	if err := g.pass(ctx, mu); err != nil { // one at a time
		return err
	}
	g.closed = make(chan struct{})
	return nil
}

// drain waits, the gate shut, until no commit is in flight. On error it
// opens the gate.
func (g *gate) drain(ctx context.Context, mu *sync.Mutex) error {
	for g.inFlight > 0 {
		if g.drained == nil {
			g.drained = make(chan struct{})
		}
		d := g.drained
		mu.Unlock()
		select {
		case <-d:
			mu.Lock()
		case <-ctx.Done():
			mu.Lock()
			g.open()
			return ctx.Err()
		}
	}
	return nil
}

func (g *gate) open() {
	close(g.closed)
	g.closed = nil
}
