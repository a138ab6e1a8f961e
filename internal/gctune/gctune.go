// Package gctune sets the garbage collector's pace from the live heap.
//
// With Go's default GOGC=100 the heap may grow by as much as is live before
// the next collection. A Plexus service under load keeps little live (a few
// MiB for the allocator's index of a small pool) while it turns over tens of
// KiB of garbage per call, so at thousands of calls a second it collected
// many times a second: a sixth of the allocator's CPU was the collector,
// and more went into regrowing goroutine stacks that each cycle shrank.
// And the allocator holding a million allocations keeps ~200 MB live, nearly
// all of it without pointers, which a collection marks at little cost: left
// at GOGC=100 it sat at twice its size under load.
//
// Run sets GOGC after every collection (and every few seconds) to give the
// heap a headroom of new allocation before the next one, like a ballast
// without the ballast:
//
//   - a small heap may grow to Budget (GOGC up to MaxPercent);
//   - a large one by MinHeadroom at least;
//   - and always by as much as a collection has to scan (the heap that holds
//     pointers, the goroutine stacks and the globals), so a heap of pointers
//     gets Go's default pace, and the collector's work per byte allocated
//     stays below the default's.
//
// A GOGC set in the environment always wins (Run then does nothing), and
// GOMEMLIMIT keeps applying as usual. Where the process's memory is
// limited (GOMEMLIMIT, or the memory limit of its cgroup or of one above
// it, as a container's is), the budget is at most half the limit and the least headroom a
// sixteenth of it, so a service in a small container collects well before
// it nears its limit.
//
// Restrain gives the heap a small headroom instead while a burst of work
// turns over much short-lived garbage at once (the allocator sending two
// thousand watch snapshots): left at Budget, the heap would grow by that
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
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the tuner.
const (
	// Budget is the size a heap with little live may grow to before a
	// collection.
	Budget = 160 << 20
	// MinHeadroom is how much the heap may grow between collections at
	// least.
	MinHeadroom = 32 << 20
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

// Restrain makes Run give the heap RestrainedHeadroom instead of Budget
// and MinHeadroom (still as much as a collection scans) until release is called (restraints nest; release is idempotent).
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

// Heap is what the tuner reads of the heap after a collection.
type Heap struct {
	// Live is the heap that survived the last collection.
	Live uint64
	// Scan is what a collection has to scan: the part of the heap that
	// may hold pointers, the goroutine stacks and the globals.
	Scan uint64
}

// Limits are the budget and the least headroom the tuner gives a heap.
type Limits struct {
	Budget, MinHeadroom uint64
}

// LimitsFor returns the tuner's limits for a process that may use limit
// bytes of memory (0: no limit): Budget and MinHeadroom, or half the limit
// and a sixteenth of it, whichever are lower.
func LimitsFor(limit uint64) Limits {
	l := Limits{Budget: Budget, MinHeadroom: MinHeadroom}
	if limit > 0 {
		l.Budget = min(l.Budget, limit/2)
		l.MinHeadroom = min(l.MinHeadroom, limit/16)
	}
	return l
}

// Headroom is how much the heap may grow before the next collection:
// up to lim.Budget in all, at least lim.MinHeadroom (RestrainedHeadroom
// when restrained), and at least what a collection scans.
func Headroom(h Heap, restrained bool, lim Limits) uint64 {
	if restrained {
		return max(RestrainedHeadroom, h.Scan)
	}
	room := lim.MinHeadroom
	if h.Live < lim.Budget {
		room = max(room, lim.Budget-h.Live)
	}
	return max(room, h.Scan)
}

// memoryLimit is the memory the process may use: GOMEMLIMIT or its
// cgroup's limit, whichever is lower; 0 when neither is set.
func memoryLimit() uint64 {
	limit := uint64(0)
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		limit = uint64(l)
	}
	self, _ := os.ReadFile("/proc/self/cgroup")
	if l, ok := cgroupLimit(os.DirFS("/sys/fs/cgroup"), string(self)); ok && (limit == 0 || l < limit) {
		limit = l
	}
	return limit
}

// cgroupLimit is the lowest memory limit of the process's cgroup and the
// cgroups above it, in the cgroup file system mounted at root, given the
// process's /proc/self/cgroup: cgroup v2 (memory.max), or v1's memory
// controller (memory/…/memory.limit_in_bytes). A container that sees only
// its own cgroup (its own namespace, the Kubernetes default on v2) finds
// it at the root.
func cgroupLimit(root fs.FS, self string) (uint64, bool) {
	// A v1 memory controller, where there is one, holds the limit even
	// beside a v2 hierarchy (hybrid).
	dir, file := "", "memory.max"
	if p, ok := cgroupPath(self, "memory"); ok {
		dir, file = path.Join("memory", p), "memory.limit_in_bytes"
	} else if p, ok := cgroupPath(self, ""); ok {
		dir = p
	} else if _, err := fs.Stat(root, file); err != nil {
		file = "memory/memory.limit_in_bytes"
	}
	var limit uint64
	found := false
	for {
		if b, err := fs.ReadFile(root, path.Join(dir, file)); err == nil {
			if l, ok := parseCgroupLimit(string(b)); ok && (!found || l < limit) {
				limit, found = l, true
			}
		}
		if dir == "" || dir == "." || dir == "memory" {
			return limit, found
		}
		dir = path.Dir(dir)
		if dir == "/" || dir == "." {
			dir = ""
		}
	}
}

// cgroupPath finds, in /proc/self/cgroup, the path of the process's
// cgroup of the v1 controller named (or, with "", of cgroup v2), relative
// to the controller's root.
func cgroupPath(self, controller string) (string, bool) {
	for line := range strings.Lines(self) {
		_, rest, ok := strings.Cut(strings.TrimRight(line, "\n"), ":")
		if !ok {
			continue
		}
		controllers, p, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(p, "/") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
			continue
		}
		if controller == "" && controllers == "" || controller != "" && slices.Contains(strings.Split(controllers, ","), controller) {
			if p = strings.TrimPrefix(path.Clean(p), "/"); p == "" || fs.ValidPath(p) {
				return p, true
			}
		}
	}
	return "", false
}

// parseCgroupLimit reads a cgroup's memory limit file: a number of bytes,
// or "max" (cgroup v2) or a number near 2^63 (v1) for none.
func parseCgroupLimit(s string) (uint64, bool) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil || v == 0 || v >= math.MaxInt64/2 {
		return 0, false
	}
	return v, true
}

// Percent is the GOGC that gives a live heap of live bytes headroom bytes
// to grow, between 1 and max.
func Percent(live, headroom uint64, max int) int {
	if live == 0 {
		return max
	}
	p := headroom * 100 / live
	switch {
	case p < 1:
		return 1
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
	current := 100
	limit := memoryLimit()
	lim := LimitsFor(limit)
	tune := func() {
		h, ok := readHeap()
		if !ok {
			return
		}
		p := Percent(h.Live, Headroom(h, restraints.Load() > 0, lim), MaxPercent)
		// Small changes are not worth a pacer reset.
		if p*10 < current*9 || p*10 > current*11 {
			debug.SetGCPercent(p)
			current = p
		}
	}
	tune()
	logger.Debug("garbage collector tuned from the live heap", "gogc", current, "budget_bytes", lim.Budget, "memory_limit_bytes", limit)
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

var heapSamples = []string{"/gc/heap/live:bytes", "/gc/scan/heap:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes"}

// readHeap reads the live and the scanned heap from the runtime.
func readHeap() (Heap, bool) {
	s := make([]metrics.Sample, len(heapSamples))
	for i, name := range heapSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	var v [4]uint64
	for i := range s {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return Heap{}, false
		}
		v[i] = s[i].Value.Uint64()
	}
	return Heap{Live: v[0], Scan: v[1] + v[2] + v[3]}, true
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
