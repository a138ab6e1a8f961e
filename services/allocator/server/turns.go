package server

import (
	"context"
	"sync"
	"time"
)

// Snapshot turns: how many watches send their snapshots at once, and how
// long one may keep its turn.
const (
	DefaultSnapshotTurns    = 16
	DefaultSnapshotTurnHold = time.Second
)

// turns lets a few watches at a time send their snapshots. A burst of
// watches opened together (every node's agent after a restart, say)
// otherwise makes thousands of goroutines runnable at once, each with a
// snapshot to send, and everything else the allocator does, a health
// check or an Allocate, waits behind all of them in the scheduler's
// queue. Waiting watches are parked, not runnable. A watch keeps its turn
// until its snapshot is sent, or for hold at most: a client that reads
// slowly (or a snapshot too big to send in that time) then goes on
// without one, beside the others, and holds the next watches back no
// longer.
type turns struct {
	slots chan struct{}
	hold  time.Duration
	// observe is told how long a watch waited for its turn; timedOut, that
	// a turn ran out before its snapshot was sent. Either may be nil.
	observe  func(time.Duration)
	timedOut func()
	// afterFunc is time.AfterFunc (tests run out the turns themselves).
	afterFunc func(time.Duration, func()) interface{ Stop() bool }
}

func newTurns(n int, hold time.Duration) *turns {
	return &turns{slots: make(chan struct{}, n), hold: hold,
		afterFunc: func(d time.Duration, f func()) interface{ Stop() bool } { return time.AfterFunc(d, f) }}
}

// take waits for a turn, and returns the function that gives it back
// (safe to call more than once; it is called by itself after t.hold).
// With no turns configured (nil), every watch goes at once.
func (t *turns) take(ctx context.Context) (done func(), err error) {
	if t == nil {
		return func() {}, nil
	}
	start := time.Now()
	select {
	case t.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if t.observe != nil {
		t.observe(time.Since(start))
	}
	var once sync.Once
	give := func() { once.Do(func() { <-t.slots }) }
	timer := t.afterFunc(t.hold, func() {
		if t.timedOut != nil {
			t.timedOut()
		}
		give()
	})
	return func() {
		if timer.Stop() {
			give()
		}
	}, nil
}
