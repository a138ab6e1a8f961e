package app_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/membership/app"
)

// BenchmarkReadinessPropagation measures the figure of the membership issue
// against a real kube-apiserver: 1,000 Pods behind 10 Services change
// readiness once each (all of them, as fast as 16 writers can), and the
// benchmark measures how long after the last status update the last
// WatchServices event of their Services arrives, that is, the event after
// which a consumer sees every Pod with its new readiness. Each iteration
// flips every Pod once; the metrics are the median and the worst over the
// iterations. It runs with the default --batch-period and without batching,
// to show what batching costs in latency and saves in events.
//
//	go test -run '^$' -bench ReadinessPropagation -benchtime=5x ./services/membership/app/
func BenchmarkReadinessPropagation(b *testing.B) {
	for _, batch := range []time.Duration{app.DefaultOptions().BatchPeriod, 0} {
		b.Run(fmt.Sprint("batch=", batch), func(b *testing.B) { benchmarkPropagation(b, batch) })
	}
}

func benchmarkPropagation(b *testing.B, batch time.Duration) {
	const (
		pods     = 1000
		services = 10
		writers  = 16
		ns       = "bench"
	)
	cluster := startControlPlane(b)
	kubetest.InstallCRDs(b, cluster.Config)
	opts := app.DefaultOptions()
	opts.BatchPeriod = batch
	e := newEnv(b, cluster, startAllocator(b), opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	require.Eventually(b, func() bool { return e.serving(ctx) == healthpb.HealthCheckResponse_SERVING },
		30*time.Second, 20*time.Millisecond)

	_, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(b, err)
	for s := range services {
		_, err := e.kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("svc-", s), Namespace: ns},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": fmt.Sprint("svc-", s)},
				Ports:    []corev1.ServicePort{{Port: 80}},
			},
		}, metav1.CreateOptions{})
		require.NoError(b, err)
	}
	objs := make([]*corev1.Pod, pods)
	parallel(b, pods, writers, func(i int) error {
		p, err := e.kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("pod-", i), Namespace: ns, Labels: map[string]string{"app": fmt.Sprint("svc-", i%services)}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		setPodStatus(p, fmt.Sprintf("10.%d.%d.%d", 100+i/65536, i/256%256, i%256), false)
		objs[i], err = e.kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})

	w := e.watch(b, &membershipv1.WatchServicesRequest{Namespace: ns})
	// ready counts the ready endpoints of each Service as last received.
	ready := map[string]int{}
	total := map[string]int{}
	apply := func(ev *membershipv1.WatchServicesResponse) {
		if ev.GetType() != membershipv1.WatchEventType_WATCH_EVENT_TYPE_UPSERT {
			return
		}
		name := ev.GetEndpoints().GetService()
		ready[name], total[name] = 0, 0
		for _, g := range ev.GetEndpoints().GetGroups() {
			for _, ep := range g.GetEndpoints() {
				total[name]++
				if ep.GetConditions().GetReady() {
					ready[name]++
				}
			}
		}
	}
	settled := func(want int) bool {
		if len(total) < services {
			return false
		}
		for name, n := range total {
			if n != pods/services || ready[name] != want {
				return false
			}
		}
		return true
	}
	// Wait until every Pod shows up, not ready.
	for !settled(0) {
		apply(w.next(b, time.Minute))
	}

	var lags []time.Duration
	var events int
	b.ResetTimer()
	for i := range b.N {
		makeReady := i%2 == 0
		var mu sync.Mutex
		var lastUpdate time.Time
		var arrived time.Time
		done := make(chan error, 1)
		go func() {
			want := 0
			if makeReady {
				want = pods / services
			}
			for !settled(want) {
				select {
				case ev := <-w.events:
					apply(ev)
					arrived = time.Now()
					events++
				case err := <-w.err:
					done <- err
					return
				case <-time.After(time.Minute):
					done <- fmt.Errorf("the watch did not settle within a minute")
					return
				}
			}
			done <- nil
		}()
		parallel(b, pods, writers, func(j int) error {
			p := objs[j]
			setPodStatus(p, p.Status.PodIP, makeReady)
			out, err := e.kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			if err != nil {
				return err
			}
			now := time.Now()
			mu.Lock()
			objs[j] = out
			if now.After(lastUpdate) {
				lastUpdate = now
			}
			mu.Unlock()
			return nil
		})
		require.NoError(b, <-done)
		lags = append(lags, arrived.Sub(lastUpdate))
	}
	b.StopTimer()
	slices.Sort(lags)
	b.ReportMetric(float64(lags[len(lags)/2].Microseconds())/1000, "median-lag-ms")
	b.ReportMetric(float64(lags[len(lags)-1].Microseconds())/1000, "max-lag-ms")
	b.ReportMetric(float64(events)/float64(b.N), "events/flip")
	b.Logf("lags after the last status update: %v", lags)
}

// parallel runs fn(0..n-1) on workers goroutines and fails on the first
// error.
func parallel(tb testing.TB, n, workers int, fn func(i int) error) {
	tb.Helper()
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			tb.Fatal(err)
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		tb.Fatal(err)
	default:
	}
}
