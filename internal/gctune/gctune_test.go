package gctune

import (
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

func TestHeadroom(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		h          Heap
		restrained bool
		want       uint64
	}{
		{Heap{}, false, Budget}, // empty: the whole budget
		{Heap{Live: 8 * mib, Scan: 2 * mib}, false, Budget - 8*mib}, // small: up to the budget
		{Heap{Live: 120 * mib}, false, 40 * mib},                    //
		{Heap{Live: 140 * mib}, false, MinHeadroom},                 // near the budget: at least MinHeadroom
		{Heap{Live: 200 * mib, Scan: 12 * mib}, false, MinHeadroom}, // the allocator at 1M: mostly without pointers
		{Heap{Live: 1024 * mib, Scan: 900 * mib}, false, 900 * mib}, // pointers: as much as a collection scans
		{Heap{Live: 8 * mib, Scan: 2 * mib}, true, RestrainedHeadroom},
		{Heap{Live: 200 * mib, Scan: 12 * mib}, true, RestrainedHeadroom},
		{Heap{Live: 200 * mib, Scan: 64 * mib}, true, 64 * mib},
	} {
		if got := Headroom(tc.h, tc.restrained, LimitsFor(0)); got != tc.want {
			t.Errorf("Headroom(%+v, restrained %v) = %d MiB, want %d MiB", tc.h, tc.restrained, got/mib, tc.want/mib)
		}
	}
}

// TestLimitsFollowMemoryLimit: in a container of 128 MiB the budget is
// 64 MiB and a heap of 100 MiB live may grow by 8 MiB, not 32; a limit
// far above the defaults changes nothing.
func TestLimitsFollowMemoryLimit(t *testing.T) {
	const mib = 1 << 20
	small := LimitsFor(128 * mib)
	if want := (Limits{Budget: 64 * mib, MinHeadroom: 8 * mib}); small != want {
		t.Fatalf("LimitsFor(128 MiB) = %+v, want %+v", small, want)
	}
	if got := Headroom(Heap{Live: 8 * mib, Scan: 2 * mib}, false, small); got != 56*mib {
		t.Errorf("small heap: headroom %d MiB, want 56", got/mib)
	}
	if got := Headroom(Heap{Live: 100 * mib, Scan: 2 * mib}, false, small); got != 8*mib {
		t.Errorf("heap past the budget: headroom %d MiB, want 8", got/mib)
	}
	if got := LimitsFor(8 << 30); got != LimitsFor(0) {
		t.Errorf("LimitsFor(8 GiB) = %+v, want the defaults", got)
	}
}

func TestParseCgroupLimit(t *testing.T) {
	for in, want := range map[string]uint64{"134217728\n": 128 << 20, "536870912": 512 << 20} {
		if got, ok := parseCgroupLimit(in); !ok || got != want {
			t.Errorf("parseCgroupLimit(%q) = %d, %v, want %d", in, got, ok, want)
		}
	}
	for _, in := range []string{"max\n", "9223372036854771712\n", "", "0", "-1", "12ab"} {
		if got, ok := parseCgroupLimit(in); ok {
			t.Errorf("parseCgroupLimit(%q) = %d, want no limit", in, got)
		}
	}
}

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live, headroom uint64
		want           int
	}{
		{0, Budget, MaxPercent},
		{1 * mib, 128 * mib, MaxPercent},  // 12800 % capped
		{8 * mib, 128 * mib, 1600},        //
		{128 * mib, 128 * mib, 100},       // headroom equals live: Go's default
		{200 * mib, MinHeadroom, 16},      // below the default
		{64 << 30, MinHeadroom, 1},        // never below 1
		{Budget / 20, Budget, MaxPercent}, // exactly at the cap
	} {
		if got := Percent(tc.live, tc.headroom, MaxPercent); got != tc.want {
			t.Errorf("Percent(%d MiB, %d MiB) = %d, want %d", tc.live/mib, tc.headroom/mib, got, tc.want)
		}
	}
}

// TestReadHeapCountsPointers: memory that holds pointers is what a
// collection scans, memory without them is not.
func TestReadHeapCountsPointers(t *testing.T) {
	runtime.GC()
	before, ok := readHeap()
	if !ok {
		t.Fatal("the runtime does not report the heap")
	}
	bytes := make([]byte, 64<<20)
	ptrs := make([]*byte, 4<<20) // 32 MiB of pointers
	runtime.GC()
	after, _ := readHeap()
	// Within 8 MiB: what the test binary itself frees or keeps meanwhile.
	if grew := int64(after.Live) - int64(before.Live); grew < 88<<20 {
		t.Errorf("live heap grew by %d MiB, want the 96 allocated", grew>>20)
	}
	if grew := int64(after.Scan) - int64(before.Scan); grew < 24<<20 || grew > 40<<20 {
		t.Errorf("scanned heap grew by %d MiB, want the 32 of pointers, not the 64 of bytes", grew>>20)
	}
	runtime.KeepAlive(bytes)
	runtime.KeepAlive(ptrs)
}

func TestRunSetsGOGCUnlessTheEnvironmentDoes(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	defer debug.SetGCPercent(debug.SetGCPercent(100))

	t.Setenv("GOGC", "100")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Run(ctx, logger); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return although GOGC is set")
	}
	cancel()
	if got := gogc(); got != 100 {
		t.Fatalf("GOGC changed to %d although the environment set it", got)
	}
}

// runTuner runs Run without GOGC in the environment until the test ends,
// and puts GOGC back then.
func runTuner(t *testing.T) {
	t.Helper()
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	if v, set := os.LookupEnv("GOGC"); set {
		os.Unsetenv("GOGC")
		t.Cleanup(func() { os.Setenv("GOGC", v) })
	}
	runtime.GC() // the live heap as it is now, not as a test before left it
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go Run(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func TestRunRaisesGOGCForASmallHeap(t *testing.T) {
	// The test binary's live heap is a few MiB: far below the headroom.
	runTuner(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		p := gogc()
		if p > 100 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GOGC is still %d", p)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRunFollowsAJumpAtOnce: when the live heap grows from a few MiB to
// more than the budget, GOGC comes down to give it MinHeadroom after the
// next collection, not at the next periodic look.
func TestRunFollowsAJumpAtOnce(t *testing.T) {
	runTuner(t)
	deadline := time.Now().Add(5 * time.Second)
	for gogc() <= 100 {
		if time.Now().After(deadline) {
			t.Fatal("GOGC was not raised for the small heap")
		}
		time.Sleep(10 * time.Millisecond)
	}

	live := make([][]byte, 0, 200)
	for range 200 {
		live = append(live, make([]byte, 1<<20))
	}
	runtime.GC()
	deadline = time.Now().Add(Interval / 2) // well before the ticker
	for want := Percent(200<<20, MinHeadroom, MaxPercent); gogc() > want*11/10+1; {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC is still %d with %d MiB live", gogc(), len(live))
		}
		time.Sleep(5 * time.Millisecond)
	}
	runtime.KeepAlive(live)
}

func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// TestRestrain: while a restraint holds, a small heap gets
// RestrainedHeadroom (so GOGC falls at once, not at the next periodic
// look); released, the full headroom again. Restraints nest, and a second
// release of the same one changes nothing.
func TestRestrain(t *testing.T) {
	runTuner(t)
	wait := func(what string, ok func(int) bool) {
		t.Helper()
		deadline := time.Now().Add(Interval / 2) // well before the ticker
		for !ok(gogc()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: GOGC is %d", what, gogc())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	live := make([][]byte, 0, 4)
	for range 4 { // 16 MiB of headroom on 4 MiB live is 400 %
		live = append(live, make([]byte, 1<<20))
	}
	runtime.GC()
	wait("a small heap", func(p int) bool { return p > 1000 })
	release := Restrain()
	inner := Restrain()
	wait("restrained", func(p int) bool { return p < 1000 })
	restrained := gogc()
	inner()
	inner()
	// The second release of the same restraint is not counted: one still
	// holds, which is all the tuner reads when it is woken.
	if n := restraints.Load(); n != 1 {
		t.Fatalf("%d restraints after one of two was released (twice), want 1", n)
	}
	if gogc() != restrained {
		t.Fatalf("GOGC %d after one of two restraints was released (twice), want still %d", gogc(), restrained)
	}
	release()
	wait("released", func(p int) bool { return p > 1000 })
	runtime.KeepAlive(live)
}

// FuzzParseCgroupLimit: whatever a cgroup file holds, a limit is read only
// from a plain number of bytes.
func FuzzParseCgroupLimit(f *testing.F) {
	f.Add("134217728\n")
	f.Add("max\n")
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := parseCgroupLimit(s)
		if ok && (v == 0 || strconv.FormatUint(v, 10) != strings.TrimLeft(strings.TrimSpace(s), "+0")) {
			t.Fatalf("parseCgroupLimit(%q) = %d", s, v)
		}
	})
}

// TestCgroupLimit: the lowest limit of the process's cgroup and those
// above it, on cgroup v2 and v1, and at the root for a container that sees
// only its own cgroup.
func TestCgroupLimit(t *testing.T) {
	const mib = 1 << 20
	file := func(data string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(data)} }
	for _, tc := range []struct {
		name  string
		fs    fstest.MapFS
		self  string
		want  uint64
		found bool
	}{
		{"v2, a limit above the process's cgroup", fstest.MapFS{
			"memory.max":              file("max\n"),
			"kubepods/memory.max":     file("536870912\n"),
			"kubepods/pod/memory.max": file("max\n"),
		}, "0::/kubepods/pod\n", 512 * mib, true},
		{"v2, the lower of two", fstest.MapFS{
			"a/memory.max":   file("536870912\n"),
			"a/b/memory.max": file("134217728\n"),
		}, "0::/a/b\n", 128 * mib, true},
		{"v2, its own namespace", fstest.MapFS{"memory.max": file("268435456\n")}, "0::/\n", 256 * mib, true},
		{"v2, no limit", fstest.MapFS{"memory.max": file("max\n"), "user.slice/memory.max": file("max\n")}, "0::/user.slice\n", 0, false},
		{"v1", fstest.MapFS{
			"memory/memory.limit_in_bytes":          file("9223372036854771712\n"),
			"memory/docker/x/memory.limit_in_bytes": file("268435456\n"),
		}, "12:cpu,cpuacct:/docker/x\n5:memory:/docker/x\n0::/\n", 256 * mib, true},
		{"no /proc/self/cgroup: the root's", fstest.MapFS{"memory/memory.limit_in_bytes": file("268435456\n")}, "", 256 * mib, true},
		{"a path out of the namespace", fstest.MapFS{"memory.max": file("134217728\n")}, "0::/../../x\n", 128 * mib, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found := cgroupLimit(tc.fs, tc.self)
			if got != tc.want || found != tc.found {
				t.Errorf("cgroupLimit = %d, %v; want %d, %v", got, found, tc.want, tc.found)
			}
		})
	}
}

// FuzzCgroupPath: whatever /proc/self/cgroup holds, a path found is a
// valid path under the controller's root.
func FuzzCgroupPath(f *testing.F) {
	f.Add("0::/kubepods/pod\n")
	f.Add("5:memory:/docker/x\n0::/\n")
	f.Fuzz(func(t *testing.T, self string) {
		for _, c := range []string{"", "memory"} {
			if p, ok := cgroupPath(self, c); ok && p != "" && !fs.ValidPath(p) {
				t.Fatalf("cgroupPath(%q, %q) = %q", self, c, p)
			}
		}
	})
}
