package app_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// fanOut is what the subscribers of one change report.
type fanOut struct {
	mu      sync.Mutex
	service string
	want    int // ready endpoints the change leads to
	arrived []time.Time
	done    chan struct{}
	left    int
}

// BenchmarkFanOut: one real membership (its own process, default flags)
// watching a real kube-apiserver with 100 Services of 10 Pods each, and S
// subscribers, each on its own connection, streaming every Service as an
// importer does. One Pod at a time changes readiness (50 changes, each
// once every subscriber saw the one before); reported:
//
//   - spread-p50-ms, spread-max-ms: the change's event at the last
//     subscriber after the first;
//
//   - cpu-ms/change and cpu-µs/change/sub: membership's CPU time (user +
//     system) per change, and divided by the subscribers;
//
//   - rss-MB and KB/sub: membership's resident memory with the
//     subscribers connected, and per subscriber against none.
//
//     go test -run '^$' -bench FanOut -benchtime 1x -count 3 ./services/membership/app/
func BenchmarkFanOut(b *testing.B) {
	bin := proctest.Build(b, "./services/membership")
	for _, subs := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			for b.Loop() {
				benchFanOut(b, bin, subs)
			}
		})
	}
}

func benchFanOut(b *testing.B, bin string, subs int) {
	const (
		services = 100
		perSvc   = 10
		changes  = 50
		ns       = "bench"
	)
	cluster := startControlPlane(b)
	kubetest.InstallCRDs(b, cluster.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	kube := cluster.Clientset
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(b, err)
	for s := range services {
		_, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("svc-", s), Namespace: ns},
			Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": fmt.Sprint("svc-", s)}, Ports: []corev1.ServicePort{{Port: 80}}},
		}, metav1.CreateOptions{})
		require.NoError(b, err)
	}
	pods := make([]*corev1.Pod, services*perSvc)
	parallel(b, len(pods), 16, func(i int) error {
		p, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("pod-", i), Namespace: ns, Labels: map[string]string{"app": fmt.Sprint("svc-", i%services)}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		setPodStatus(p, fmt.Sprintf("10.100.%d.%d", i/256, i%256), true)
		pods[i], err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})

	proc := proctest.Start(b, bin, []string{"--kubeconfig", cluster.Kubeconfig, "--cluster-name", "bench",
		"--allocator-addr", startAllocator(b), "--log-level", "warn"})
	time.Sleep(2 * time.Second) // caches synced, the process settled
	rssNone := proc.Usage().RSS

	cur := &fanOut{}
	var ready sync.WaitGroup
	for range subs {
		conn, err := dial.New(proc.GRPCAddr, dial.WithoutRetry())
		require.NoError(b, err)
		b.Cleanup(func() { conn.Close() })
		stream, err := membershipv1.NewMembershipServiceClient(conn).WatchServices(ctx, &membershipv1.WatchServicesRequest{Namespace: ns})
		require.NoError(b, err)
		ready.Add(1)
		go func() {
			synced := false
			for {
				ev, err := stream.Recv()
				if err != nil {
					return
				}
				now := time.Now()
				switch ev.GetType() {
				case membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_END:
					if !synced {
						synced = true
						ready.Done()
					}
				case membershipv1.WatchEventType_WATCH_EVENT_TYPE_UPSERT:
					n := 0
					for _, g := range ev.GetEndpoints().GetGroups() {
						for _, ep := range g.GetEndpoints() {
							if ep.GetConditions().GetReady() {
								n++
							}
						}
					}
					cur.mu.Lock()
					if ev.GetEndpoints().GetService() == cur.service && n == cur.want && cur.left > 0 {
						cur.arrived = append(cur.arrived, now)
						if cur.left--; cur.left == 0 {
							close(cur.done)
						}
					}
					cur.mu.Unlock()
				}
			}
		}()
	}
	ready.Wait()
	time.Sleep(time.Second)
	u0 := proc.Usage()

	var spreads []time.Duration
	for c := range changes {
		i := (c * 37) % len(pods) // spread over services
		p := pods[i]
		readyNow := p.Status.Conditions[0].Status != corev1.ConditionTrue
		cur.mu.Lock()
		cur.service = fmt.Sprintf("namespaces/%s/services/svc-%d", ns, i%services)
		cur.want = perSvc - 1
		if readyNow {
			cur.want = perSvc
		}
		cur.arrived, cur.left, cur.done = nil, subs, make(chan struct{})
		done := cur.done
		cur.mu.Unlock()
		setPodStatus(p, p.Status.PodIP, readyNow)
		pods[i], err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		require.NoError(b, err)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			b.Fatalf("change %d did not reach every subscriber", c)
		}
		cur.mu.Lock()
		spreads = append(spreads, slices.MaxFunc(cur.arrived, time.Time.Compare).Sub(slices.MinFunc(cur.arrived, time.Time.Compare)))
		cur.mu.Unlock()
		// Back again, so every change is a flip from all ready.
		setPodStatus(pods[i], pods[i].Status.PodIP, !readyNow)
		cur.mu.Lock()
		cur.want, cur.arrived, cur.left, cur.done = perSvc, nil, subs, make(chan struct{})
		done = cur.done
		cur.mu.Unlock()
		pods[i], err = kube.CoreV1().Pods(ns).UpdateStatus(ctx, pods[i], metav1.UpdateOptions{})
		require.NoError(b, err)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			b.Fatalf("change %d back did not reach every subscriber", c)
		}
	}
	u1 := proc.Usage()
	slices.Sort(spreads)
	perChange := (u1.CPU - u0.CPU) / (2 * changes)
	b.ReportMetric(float64(spreads[len(spreads)/2].Microseconds())/1000, "spread-p50-ms")
	b.ReportMetric(float64(spreads[len(spreads)-1].Microseconds())/1000, "spread-max-ms")
	b.ReportMetric(float64(perChange.Microseconds())/1000, "cpu-ms/change")
	b.ReportMetric(float64(perChange.Microseconds())/float64(subs), "cpu-µs/change/sub")
	b.ReportMetric(u0.RSS/(1<<20), "rss-MB")
	b.ReportMetric((u0.RSS-rssNone)/float64(subs)/1024, "KB/sub")
}
