package selector

import (
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/labels"
)

const (
	benchServices  = 10_000
	benchWorkloads = 100_000
	benchSeed      = 42
	benchChanges   = 4096
)

// linearScan answers Select the way the Kubernetes EndpointSlice controller
// and Linkerd's ExternalWorkload controller do: by building a selector from
// every Service of the namespace and matching it against the labels.
type linearScan struct {
	namespace string
	services  []fleetService // sorted by name, as a lister would return them
	// cached holds a parsed selector per Service when the scan may reuse them.
	cached []labels.Selector
}

func newLinearScan(f *fleet, cache bool) *linearScan {
	s := &linearScan{namespace: f.namespace, services: slices.Clone(f.services)}
	slices.SortFunc(s.services, func(a, b fleetService) int {
		return compareServiceKeys(ServiceKey{Name: a.name}, ServiceKey{Name: b.name})
	})
	if cache {
		for _, svc := range s.services {
			s.cached = append(s.cached, labels.SelectorFromValidatedSet(svc.selector))
		}
	}
	return s
}

func (s *linearScan) Select(ns string, workloadLabels map[string]string) []ServiceKey {
	if ns != s.namespace {
		return nil
	}
	var out []ServiceKey
	set := labels.Set(workloadLabels)
	for i, svc := range s.services {
		if svc.selector == nil {
			continue
		}
		var sel labels.Selector
		if s.cached != nil {
			sel = s.cached[i]
		} else {
			sel = labels.SelectorFromValidatedSet(labels.Set(svc.selector))
		}
		if sel.Matches(set) {
			out = append(out, ServiceKey{Namespace: ns, Name: svc.name})
		}
	}
	return out
}

// runAffected measures Affected over label-only changes, one timed op each,
// and reports the p99 and the mean number of affected Services.
func runAffected(b *testing.B, f Finder, changes [][2]Workload) {
	var h latencies
	affected := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c := &changes[i%len(changes)]
		start := time.Now()
		out := Affected(f, &c[0], &c[1])
		h.record(time.Since(start))
		affected += len(out)
	}
	b.StopTimer()
	b.ReportMetric(float64(h.quantile(0.99).Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(affected)/float64(b.N), "services/op")
}

// BenchmarkSelect: a workload label change → the affected Services, through
// the index, with 10,000 Services in one namespace.
func BenchmarkSelect(b *testing.B) {
	f := newFleet(benchServices, benchSeed)
	idx := New()
	f.loadServices(idx)
	runAffected(b, idx, f.relabels(benchChanges))
}

// BenchmarkLinearScan: the same change answered as the seed controllers do.
func BenchmarkLinearScan(b *testing.B) {
	f := newFleet(benchServices, benchSeed)
	runAffected(b, newLinearScan(f, false), f.relabels(benchChanges))
}

// BenchmarkLinearScanCachedSelectors: the same scan with selectors parsed
// once, as the EndpointSlice controller's ServiceSelectorCache does; the scan
// itself remains.
func BenchmarkLinearScanCachedSelectors(b *testing.B) {
	f := newFleet(benchServices, benchSeed)
	runAffected(b, newLinearScan(f, true), f.relabels(benchChanges))
}

// BenchmarkSelectVsLinearScan runs both in one run on the same changes and
// reports their ratio: each iteration puts one change through the scan and a
// block of indexBlock changes through the index, checking that they agree on
// the change they share. The scan leaves megabytes of garbage per change; it
// is collected outside the timed regions so that it does not land on the
// index as GC assist work (which leaves it out of the scan's time too: the
// ratio errs in the scan's favour).
func BenchmarkSelectVsLinearScan(b *testing.B) {
	const indexBlock = 1024
	f := newFleet(benchServices, benchSeed)
	idx := New()
	f.loadServices(idx)
	scan := newLinearScan(f, false)
	changes := f.relabels(benchChanges)
	var hIdx, hScan latencies
	var tIdx, tScan time.Duration
	b.ResetTimer()
	for i := range b.N {
		c := &changes[i%len(changes)]
		start := time.Now()
		want := Affected(scan, &c[0], &c[1])
		d := time.Since(start)
		hScan.record(d)
		tScan += d
		runtime.GC()
		for j := range indexBlock {
			c := &changes[(i*indexBlock+j)%len(changes)]
			start := time.Now()
			Affected(idx, &c[0], &c[1])
			d := time.Since(start)
			hIdx.record(d)
			tIdx += d
		}
		if got := Affected(idx, &c[0], &c[1]); !slices.Equal(got, want) {
			b.Fatalf("change %d: index says %v, scan says %v", i, got, want)
		}
	}
	b.StopTimer()
	idxPerOp := float64(tIdx.Nanoseconds()) / float64(b.N*indexBlock)
	scanPerOp := float64(tScan.Nanoseconds()) / float64(b.N)
	b.ReportMetric(idxPerOp, "index-ns/op")
	b.ReportMetric(scanPerOp, "scan-ns/op")
	b.ReportMetric(scanPerOp/idxPerOp, "speedup")
	b.ReportMetric(float64(hIdx.quantile(0.99).Nanoseconds()), "index-p99-ns")
	b.ReportMetric(float64(hScan.quantile(0.99).Nanoseconds()), "scan-p99-ns")
}

// BenchmarkSetWorkload: an informer update of one workload's labels in an
// index holding 10,000 Services and 100,000 workloads.
func BenchmarkSetWorkload(b *testing.B) {
	f := newFleet(benchServices, benchSeed)
	idx := loadFleet(f, benchWorkloads)
	changes := f.relabels(benchChanges)
	workloads := make([]WorkloadKey, benchChanges)
	for i := range workloads {
		workloads[i], _ = f.workload(i * (benchWorkloads / benchChanges))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c := &changes[i%len(changes)]
		idx.SetWorkload(workloads[i%len(workloads)], c[(i/len(changes))%2].Labels)
	}
}

// heapHeld returns the live heap after a full collection.
func heapHeld() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// loadFleet fills an index with the fleet's Services and n workloads; the
// workloads' labels are made on the fly and dropped, so what stays is what
// the index holds.
func loadFleet(f *fleet, n int) *Index {
	idx := New()
	f.loadServices(idx)
	for i := range n {
		key, l := f.workload(i)
		idx.SetWorkload(key, l)
	}
	return idx
}

// BenchmarkMemory: 100,000 workloads and 10,000 Services held in one index;
// reports the heap it holds per workload, Services included.
func BenchmarkMemory(b *testing.B) {
	f := newFleet(benchServices, benchSeed)
	var perWorkload float64
	for range b.N {
		before := heapHeld()
		idx := loadFleet(f, benchWorkloads)
		after := heapHeld()
		runtime.KeepAlive(idx)
		perWorkload += float64(after-before) / benchWorkloads
	}
	b.ReportMetric(perWorkload/float64(b.N), "heap-B/workload")
}

// TestMemoryPerWorkload keeps the memory figure honest at a tenth of the
// benchmark's size.
func TestMemoryPerWorkload(t *testing.T) {
	f := newFleet(benchServices/10, benchSeed)
	before := heapHeld()
	idx := loadFleet(f, benchWorkloads/10)
	after := heapHeld()
	require.Equal(t, benchWorkloads/10, idx.Stats().Workloads)
	require.Equal(t, benchServices/10, idx.Stats().Services)
	perWorkload := float64(after-before) / (benchWorkloads / 10)
	t.Logf("heap held per workload: %.0f B", perWorkload)
	require.Less(t, perWorkload, 1024.0)
	runtime.KeepAlive(idx)
}

// TestFleetSelectsAHandful checks the benchmark's premise: a workload is
// selected by a few Services, not by none and not by hundreds, and the index
// agrees with the linear scan on every one of the changes measured.
func TestFleetSelectsAHandful(t *testing.T) {
	f := newFleet(benchServices, benchSeed)
	idx := New()
	f.loadServices(idx)
	scan := newLinearScan(f, false)
	total := 0
	changes := f.relabels(40)
	for _, c := range changes {
		got := idx.Select(c[0].Namespace, c[0].Labels)
		require.Equal(t, scan.Select(c[0].Namespace, c[0].Labels), got)
		require.Equal(t, scan.Select(c[1].Namespace, c[1].Labels), idx.Select(c[1].Namespace, c[1].Labels))
		require.Equal(t, Affected(scan, &c[0], &c[1]), Affected(idx, &c[0], &c[1]))
		total += len(got)
	}
	mean := float64(total) / float64(len(changes))
	require.Greater(t, mean, 1.0)
	require.Less(t, mean, 10.0)
}

func TestLatencyHistogram(t *testing.T) {
	var h latencies
	require.Zero(t, h.quantile(0.99))
	for i := range 1000 {
		h.record(time.Duration(i+1) * time.Microsecond)
	}
	h.record(-time.Second)
	p99 := h.quantile(0.99)
	require.InDelta(t, float64(990*time.Microsecond), float64(p99), float64(2*time.Microsecond))
	require.Equal(t, time.Duration(0), h.quantile(0))
	for _, ns := range []uint64{0, 1, 1023, 1024, 1025, 4095, 1 << 40, 1<<63 + 12345} {
		b := latencyBucket(ns)
		require.LessOrEqual(t, bucketLow(b), ns)
		require.Less(t, b, len(h.counts))
		if b+1 < len(h.counts) {
			require.Greater(t, bucketLow(b+1), ns)
		}
	}
}
