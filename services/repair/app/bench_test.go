package app_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	repairv1 "github.com/plexusnet/plexus/api/repair/v1"
	"github.com/plexusnet/plexus/services/repair/decide"
	"github.com/plexusnet/plexus/services/repair/internal/repairtest"
	"github.com/plexusnet/plexus/services/repair/kube"
	"github.com/plexusnet/plexus/services/repair/pass"
)

// BenchmarkFullPass measures a full repair pass against a real
// kube-apiserver holding PLEXUS_BENCH_PODS Pods (50,000 by default), each
// owning one allocation of a real allocator served on loopback: the
// allocations listed page by page, the owners resolved through synced
// informers, the decision, and (none here) the actions. It also reports
// how long the setup took: creating the Pods and the allocations, and the
// informers' first sync. Run it with
//
//	go test -run '^$' -bench FullPass -benchtime 5x -timeout 30m ./services/repair/app/
//
// The sub-benchmark runs b.N passes over the same fleet and reports the
// median of each phase.
func BenchmarkFullPass(b *testing.B) {
	n := 50000
	if s := os.Getenv("PLEXUS_BENCH_PODS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(b, err, "PLEXUS_BENCH_PODS")
	}
	e := startKube(b)
	ns := e.namespace(b)
	alloc := repairtest.StartAllocator(b)
	_, err := alloc.Client.CreatePool(context.Background(), &allocatorv1.CreatePoolRequest{PoolId: "pods", Pool: &allocatorv1.Pool{Cidrs: []string{"10.128.0.0/14"}}})
	require.NoError(b, err)

	// Many concurrent creates through an unthrottled client.
	cfg := rest.CopyConfig(e.cfg)
	cfg.QPS, cfg.Burst = -1, 0
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(b, err)
	t0 := time.Now()
	var created atomic.Int64
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 48 {
		wg.Go(func() {
			for i := range work {
				p, err := client.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%06d", i), Namespace: ns, Labels: map[string]string{"app": "bench"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
				}, metav1.CreateOptions{})
				if err == nil {
					_, err = alloc.Client.Allocate(context.Background(), &allocatorv1.AllocateRequest{Pool: "pools/pods", Owner: podOwner(p)})
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
				created.Add(1)
			}
		})
	}
feed:
	for i := range n {
		select {
		case work <- i:
		case err := <-errs:
			b.Fatalf("creating pods: %v", err)
			break feed
		}
	}
	close(work)
	wg.Wait()
	require.EqualValues(b, n, created.Load())
	setup := time.Since(t0)
	b.Logf("%d pods and allocations created in %s (%.0f/s)", n, setup.Round(time.Millisecond), float64(n)/setup.Seconds())

	view, err := kube.New(kube.Config{Cluster: memberCluster, Kube: e.kube, MCS: e.mcs, Workloads: e.workloads})
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t1 := time.Now()
	go view.Run(ctx)
	require.True(b, view.WaitForSync(ctx))
	syncTime := time.Since(t1)
	b.Logf("informers synced in %s", syncTime.Round(time.Millisecond))

	// The allocator's own share of the list phase: the same pages, with
	// nothing done with them.
	var raw []time.Duration
	var firstPage, lastPage time.Duration
	for range 3 {
		t := time.Now()
		pages := 0
		for token := ""; ; pages++ {
			pt := time.Now()
			resp, err := alloc.Client.ListAllocations(ctx, &allocatorv1.ListAllocationsRequest{Pool: "pools/-", PageSize: pass.DefaultPageSize, PageToken: token})
			require.NoError(b, err)
			if pages == 0 {
				firstPage = time.Since(pt)
			}
			if token = resp.GetNextPageToken(); token == "" {
				lastPage = time.Since(pt)
				break
			}
		}
		raw = append(raw, time.Since(t))
	}
	b.Logf("allocator ListAllocations alone: %s for all pages (median of 3); first page %s, last page %s",
		median(raw).Round(time.Millisecond), firstPage.Round(time.Microsecond), lastPage.Round(time.Microsecond))

	dcfg := decide.DefaultConfig()
	dcfg.Resolvable = view.Scopes()
	runner, err := pass.New(dcfg, alloc.Client, view)
	require.NoError(b, err)

	b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
		var total, list, dec, act []time.Duration
		for b.Loop() {
			res, err := runner.Run(ctx, false)
			require.NoError(b, err)
			require.Equal(b, repairv1.PassState_PASS_STATE_COMPLETE, res.Report.GetState(), res.Report.GetReason())
			require.EqualValues(b, n, res.Report.GetAllocations())
			require.Zero(b, res.Report.GetFindings())
			total = append(total, res.Timings.Total)
			list = append(list, res.Timings.List)
			dec = append(dec, res.Timings.Decide)
			act = append(act, res.Timings.Act)
		}
		b.ReportMetric(median(total).Seconds(), "pass-s")
		b.ReportMetric(slices.Max(total).Seconds(), "pass-max-s")
		b.ReportMetric(float64(median(list).Milliseconds()), "list-ms")
		b.ReportMetric(float64(median(dec).Milliseconds()), "decide-ms")
		b.ReportMetric(float64(median(act).Milliseconds()), "act-ms")
		b.ReportMetric(syncTime.Seconds(), "informer-sync-s")
		b.ReportMetric(setup.Seconds(), "create-s")
		b.ReportMetric(float64(median(raw).Milliseconds()), "allocator-list-ms")
	})
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
