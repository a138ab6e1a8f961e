package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// Short leader election timings, so that a kill is taken over in seconds:
// the lease runs out 2 s after the last renewal.
var electionFlags = []string{"--leader-elect", "--lease-duration=2s", "--renew-deadline=1500ms", "--retry-period=250ms", "--lease-namespace=default"}

// kills is how many times each service's leader is killed.
const kills = 10

// metricsClient gives up quickly on a paused or killed process.
var metricsClient = &http.Client{Timeout: 500 * time.Millisecond}

// leaders returns which of procs report themselves leader on /metrics
// (gauge metric == 1).
func leaders(procs []*proctest.Proc, metric string) []int {
	re := regexp.MustCompile(`(?m)^` + metric + `\{[^}]*\} 1$`)
	var found []int
	for i, p := range procs {
		resp, err := metricsClient.Get("http://" + p.HTTPAddr + "/metrics")
		if err != nil {
			continue // killed, paused, or not up yet
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if re.Match(body) {
			found = append(found, i)
		}
	}
	return found
}

// leaderIndex returns the one replica that reports itself leader, or -1;
// two at once fail the test.
func leaderIndex(t *testing.T, procs []*proctest.Proc, metric string) int {
	t.Helper()
	l := leaders(procs, metric)
	require.LessOrEqual(t, len(l), 1, "two replicas report themselves %s", metric)
	if len(l) == 0 {
		return -1
	}
	return l[0]
}

// failovers kills the leader of procs kills times and returns how long
// each takeover took: from the SIGKILL until another replica reports
// itself leader. after runs once the new leader is known.
func failovers(t *testing.T, procs []*proctest.Proc, metric string, after func(leader int)) []time.Duration {
	t.Helper()
	var took []time.Duration
	for range kills {
		var leader int
		require.Eventually(t, func() bool { leader = leaderIndex(t, procs, metric); return leader >= 0 }, 30*time.Second, 20*time.Millisecond, "no %s", metric)
		killed := time.Now()
		procs[leader].Kill()
		var next int
		require.Eventually(t, func() bool { next = leaderIndex(t, procs, metric); return next >= 0 }, 30*time.Second, 10*time.Millisecond, "nobody took over")
		took = append(took, time.Since(killed))
		require.NotEqual(t, leader, next)
		if after != nil {
			after(next)
		}
		procs[leader].Restart()
	}
	slices.Sort(took)
	t.Logf("%s: takeover after SIGKILL over %d kills: median %s, max %s (lease 2 s)", metric, kills, took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	return took
}

// TestLeaderFailover: two importers and two repairs; their leader is
// SIGKILLed 10 times each, and a follower takes over within the lease
// duration plus a few seconds. After every importer takeover an export
// change is written by the new leader. A paused importer leader that wakes
// up after another took over does not overwrite the new leader's work.
func TestLeaderFailover(t *testing.T) {
	etcd := kubetest.StartEtcd(t)
	cluster := kubetest.StartAPIServer(t, etcd, kubetest.WithName("b"))
	kubetest.InstallCRDs(t, cluster.Config)
	kube := kubernetes.NewForConfigOrDie(cluster.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	alloc := proctest.Start(t, proctest.Build(t, "./services/allocator"), []string{"--store", "memory"})
	conn, err := dial.New(alloc.GRPCAddr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = allocatorv1.NewAllocatorServiceClient(conn).CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "vips", Pool: &allocatorv1.Pool{Cidrs: []string{"10.96.4.0/24"}}})
	require.NoError(t, err)

	east := sourcetest.Start(t, "east")
	addrs := []string{"10.1.0.1"}
	east.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, addrs...))

	common := []string{"--cluster-name=b", "--kubeconfig=" + cluster.Kubeconfig, "--allocator-addr=" + alloc.GRPCAddr, "--source=east=" + east.Addr()}
	var importers, repairs []*proctest.Proc
	for range 2 {
		importers = append(importers, proctest.Start(t, proctest.Build(t, "./services/importer"),
			slices.Concat(common, electionFlags, []string{"--vip-pool=vips", "--lease-name=importer"})))
		repairs = append(repairs, proctest.Start(t, proctest.Build(t, "./services/repair"),
			slices.Concat(common, electionFlags, []string{"--lease-name=repair", "--interval=1s"})))
	}

	// endpoints counts the endpoints of the importer's slices of shop/web.
	// It returns the error instead of failing: the conditions of
	// Eventually and Never run on goroutines that may outlive the
	// assertion (and the test's context).
	endpoints := func() (int, error) {
		list, err := kube.DiscoveryV1().EndpointSlices("shop").List(ctx, metav1.ListOptions{
			LabelSelector: mcsnames.LabelMCSServiceName + "=web," + mcsnames.LabelManagedBy + "=" + mcsnames.ManagedBy})
		if err != nil {
			return 0, err
		}
		n := 0
		for _, s := range list.Items {
			n += len(s.Endpoints)
		}
		return n, nil
	}
	waitEndpoints := func(want int, why string) {
		require.Eventually(t, func() bool { n, err := endpoints(); return err == nil && n == want }, 20*time.Second, 20*time.Millisecond, why)
	}
	waitEndpoints(1, "the first leader imports shop/web")

	grow := func(int) {
		addrs = append(addrs, fmt.Sprintf("10.1.0.%d", len(addrs)+1))
		east.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, addrs...))
		waitEndpoints(len(addrs), "the new leader writes the change")
	}
	took := failovers(t, importers, "plexus_importer_leader", grow)
	require.LessOrEqual(t, took[len(took)-1], 2*time.Second+5*time.Second)
	took = failovers(t, repairs, "plexus_repair_leader", nil)
	require.LessOrEqual(t, took[len(took)-1], 2*time.Second+5*time.Second)

	// A paused leader: another replica takes over and writes a change; the
	// old leader wakes up and must not put its stale view back.
	old := leaderIndex(t, importers, "plexus_importer_leader")
	require.GreaterOrEqual(t, old, 0)
	require.NoError(t, importers[old].Signal(syscall.SIGSTOP))
	require.Eventually(t, func() bool { return slices.Equal(leaders(importers, "plexus_importer_leader"), []int{1 - old}) }, 30*time.Second, 20*time.Millisecond,
		"the follower takes over from the paused leader")
	grow(0)
	require.NoError(t, importers[old].Signal(syscall.SIGCONT))
	require.Never(t, func() bool { n, err := endpoints(); return err == nil && n != len(addrs) }, 5*time.Second, 50*time.Millisecond, "the woken leader overwrote the new leader's slices")
	require.Eventually(t, func() bool { return slices.Equal(leaders(importers, "plexus_importer_leader"), []int{1 - old}) }, 10*time.Second, 20*time.Millisecond,
		"the woken replica steps down")
}
