// Package gctune sets the garbage collector's pace from the live heap.
//
// With Go's default GOGC=100 the heap may grow by as much as is live before
// the next collection. A Plexus service under load keeps little live (a few
// MiB for the allocator's index of a small pool) while it turns over tens of
// KiB of garbage per call, so at thousands of calls a second it collected
// many times a second: a sixth of the allocator's CPU was the collector,
// and more went into regrowing goroutine stacks that each cycle shrank.
//
// Run gives the heap a fixed headroom instead, like a ballast without the
// ballast: GOGC is set after every collection (and every few seconds) so
// that the next collection comes after Headroom bytes of new allocation or
// after the live heap doubles, whichever is later. Large heaps keep
// GOGC=100; a small heap gets up to MaxPercent. A GOGC set in the
// environment always wins (Run then does nothing), and GOMEMLIMIT keeps
// applying as usual.
//
// Restrain gives the heap a small headroom instead while a burst of work
// turns over much short-lived garbage at once (the allocator sending two
// thousand watch snapshots): left at Headroom, the heap would grow by that
// much garbage, and the runtime keeps its bookkeeping for a heap of that
// size after it is collected.
//
// Tuning after every collection matters when the live heap jumps: GOGC is
// a ratio, so the MaxPercent set for a nearly empty heap, left in place
// while the allocator loads a million allocations, would let the heap
// grow to twenty times what is then live.
package gctune

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the tuner.
const (
	// Headroom is how much the heap may grow between collections at least.
	Headroom = 128 << 20
	// MaxPercent bounds GOGC for a nearly empty heap.
	MaxPercent = 2000
	// Interval is how often the live heap is read.
	Interval = 5 * time.Second
	// RestrainedHeadroom is the headroom while Restrain holds.
	RestrainedHeadroom = 16 << 20
)

var (
	// restraints counts the Restrain calls not yet released.
	restraints atomic.Int32
	// retune wakes Run when restraints change.
	retune = make(chan struct{}, 1)
)

// Restrain makes Run give the heap RestrainedHeadroom instead of Headroom
// until release is called (restraints nest; release is idempotent).
func Restrain() (release func()) {
	restraints.Add(1)
	wake()
	var once sync.Once
	return func() {
		once.Do(func() {
			restraints.Add(-1)
			wake()
		})
	}
}

func wake() {
	select {
	case retune <- struct{}{}:
	default:
	}
}

// Percent is the GOGC that gives a live heap of live bytes at least
// headroom bytes to grow, never below Go's default 100 nor above max.
func Percent(live, headroom uint64, max int) int {
	if live == 0 {
		return max
	}
	p := headroom * 100 / live
	switch {
	case p < 100:
		return 100
	case p > uint64(max):
		return max
	}
	return int(p)
}

// Run tunes GOGC until ctx ends. It returns at once when GOGC is set in the
// environment.
func Run(ctx context.Context, logger *slog.Logger) {
	if _, set := os.LookupEnv("GOGC"); set {
		logger.Debug("GOGC set in the environment; not tuning the garbage collector")
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := 100
	tune := func() {
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return
		}
		headroom := uint64(Headroom)
		if restraints.Load() > 0 {
			headroom = RestrainedHeadroom
		}
		p := Percent(sample[0].Value.Uint64(), headroom, MaxPercent)
		// Small changes are not worth a pacer reset.
		if p*10 < current*9 || p*10 > current*11 {
			debug.SetGCPercent(p)
			current = p
		}
	}
	tune()
	logger.Debug("garbage collector tuned from the live heap", "gogc", current)
	cycles := afterEachGC(ctx)
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-cycles:
			tune()
		case <-retune:
			tune()
		case <-t.C:
			tune()
		}
	}
}

// sentinel is an object whose finalizer tells that a collection ran; big
// enough not to be batched into a tiny allocation, whose finalizer might
// never run.
type sentinel struct{ _ [2]*int }

// afterEachGC returns a channel that gets a value after each collection
// (dropped while one is pending), until ctx ends.
func afterEachGC(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	var arm func()
	arm = func() {
		runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
			if ctx.Err() != nil {
				return
			}
			select {
			case ch <- struct{}{}:
			default:
			}
			arm()
		})
	}
	arm()
	return ch
}
