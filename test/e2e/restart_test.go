package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// restartServices and restartPods are the size of cluster a's exports in
// the membership restart test.
const restartServices, restartPods = 5, 3

// exportServices makes, in cluster a's namespace shop, n Services of
// pods ready Pods each and their ServiceExports.
func exportServices(ctx context.Context, t *testing.T, kube kubernetes.Interface, mcs mcsclient.Interface, n, pods int) {
	t.Helper()
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		_, err := kube.CoreV1().Services("shop").Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		for j := range pods {
			pod, err := kube.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, j), Namespace: "shop", Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{NodeName: "node-0", Containers: []corev1.Container{{Name: "app", Image: "web:1"}}},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
			ip := fmt.Sprintf("10.128.%d.%d", i, j+1)
			pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
			_, err = kube.CoreV1().Pods("shop").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		_, err = mcs.MulticlusterV1beta1().ServiceExports("shop").Create(ctx,
			&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
}

// importerCaughtUp reports whether an importer leads, has queued every
// service knowing its sources' complete state and has nothing left to do;
// it returns its writes so far.
func importerCaughtUp(t *testing.T, p *proctest.Proc, sources int) (bool, float64) {
	ok := metric(t, p, "plexus_importer_leader") == 1 && metric(t, p, "plexus_importer_caught_up_sources") == float64(sources) &&
		metric(t, p, "plexus_importer_queue_depth") == 0 && metric(t, p, "plexus_importer_reconciles_running") == 0 &&
		metric(t, p, "plexus_importer_unobserved_writes") == 0
	return ok, metric(t, p, "plexus_importer_writes_total")
}

// waitImporterCaughtUp waits until importerCaughtUp holds on two reads
// with no write in between, and returns the importer's writes.
func waitImporterCaughtUp(t *testing.T, p *proctest.Proc, sources int) float64 {
	t.Helper()
	var writes float64
	require.Eventually(t, func() bool {
		ok, before := importerCaughtUp(t, p, sources)
		again, after := importerCaughtUp(t, p, sources)
		writes = after
		return ok && again && before == after
	}, time.Minute, 20*time.Millisecond, "the importer did not catch up")
	return writes
}

// TestMembershipRestartWritesNothing: cluster a's membership (a real
// process, real Services, Pods and ServiceExports) is restarted under
// cluster b's importer. The importer gets a new epoch and a complete
// snapshot of the same state: it rewrites nothing in b (slices,
// ServiceImports, derived Services, ServiceCIDRs), and the membership
// rewrites no ServiceExport status in a.
func TestMembershipRestartWritesNothing(t *testing.T) {
	etcd := kubetest.StartEtcd(t)
	a := kubetest.StartAPIServer(t, etcd, kubetest.WithName("a"), kubetest.WithEtcdPrefix("/cluster-a"))
	b := kubetest.StartAPIServer(t, etcd, kubetest.WithName("b"), kubetest.WithEtcdPrefix("/cluster-b"))
	kubetest.InstallCRDs(t, a.Config, b.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, c := range []*kubetest.Cluster{a, b} {
		_, err := c.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	alloc := proctest.Start(t, proctest.Build(t, "./services/allocator"), []string{"--store", "memory"})
	_, err := allocatorv1.NewAllocatorServiceClient(alloc.Dial(t)).CreatePool(ctx,
		&allocatorv1.CreatePoolRequest{PoolId: "vips", Pool: &allocatorv1.Pool{Cidrs: []string{"10.96.200.0/24"}}})
	require.NoError(t, err)
	mcsA := mcsclient.NewForConfigOrDie(a.Config)
	exportServices(ctx, t, a.Clientset, mcsA, restartServices, restartPods)
	membership := proctest.Start(t, proctest.Build(t, "./services/membership"),
		[]string{"--cluster-name=a", "--kubeconfig=" + a.Kubeconfig, "--allocator-addr=" + alloc.GRPCAddr})
	importer := proctest.Start(t, proctest.Build(t, "./services/importer"),
		[]string{"--cluster-name=b", "--kubeconfig=" + b.Kubeconfig, "--allocator-addr=" + alloc.GRPCAddr,
			"--source=a=" + membership.GRPCAddr, "--vip-pool=vips", "--lease-namespace=default"})
	sources := importerv1.NewImporterServiceClient(importer.Dial(t))
	sourceA := func() *importerv1.Source {
		resp, err := sources.ListSources(ctx, &importerv1.ListSourcesRequest{})
		if err != nil || len(resp.GetSources()) != 1 {
			return nil
		}
		return resp.GetSources()[0]
	}

	// Every export is imported, and every ServiceExport says so.
	require.Eventually(t, func() bool {
		list, err := b.Clientset.DiscoveryV1().EndpointSlices("shop").List(ctx, metav1.ListOptions{LabelSelector: mcsnames.LabelManagedBy + "=" + mcsnames.ManagedBy})
		if err != nil || len(list.Items) != restartServices {
			return false
		}
		for _, s := range list.Items {
			if len(s.Endpoints) != restartPods {
				return false
			}
		}
		exports, err := mcsA.MulticlusterV1beta1().ServiceExports("shop").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, se := range exports.Items {
			if c := meta.FindStatusCondition(se.Status.Conditions, "Ready"); c == nil || c.Status != metav1.ConditionTrue {
				return false
			}
		}
		return true
	}, time.Minute, 50*time.Millisecond, "the exports were not imported\n%s", importer.Log())
	waitImporterCaughtUp(t, importer, 1)
	epoch := sourceA().GetEpoch()
	writesB := kubetest.WatchWrites(t, b.Config, kubetest.EndpointSlices, kubetest.ServiceImports, kubetest.Services,
		kubetest.ServiceCIDRs, kubetest.ServiceExports, kubetest.Leases)
	writesA := kubetest.WatchWrites(t, a.Config, kubetest.ServiceExports, kubetest.EndpointSlices, kubetest.Services)
	before := metric(t, importer, "plexus_importer_writes_total")

	membership.Stop()
	restarted := time.Now()
	membership.Restart()
	require.Eventually(t, func() bool {
		s := sourceA()
		return s.GetSynced() && s.GetState() == importerv1.SourceState_SOURCE_STATE_CONNECTED && s.GetEpoch() != epoch
	}, time.Minute, 10*time.Millisecond, "the importer did not resync with the restarted membership")
	t.Logf("the importer's source was synced again %s after the membership's restart", time.Since(restarted))
	// The membership has reconciled every Service (their export statuses
	// with them) and has nothing queued.
	require.Eventually(t, func() bool {
		return metric(t, membership, "plexus_membership_reconcile_duration_seconds_count") >= restartServices &&
			metric(t, membership, "plexus_membership_queue_depth") == 0
	}, time.Minute, 10*time.Millisecond)
	require.Equal(t, before, waitImporterCaughtUp(t, importer, 1), "the importer wrote after the membership's restart")
	require.Empty(t, kubetest.Churn(writesB.Settle(t), "default/plexus-importer"), "writes in b")
	require.Equal(t, kubetest.WithoutLeases(writesB.Before), kubetest.WithoutLeases(writesB.Versions(t)))
	require.Empty(t, kubetest.Churn(writesA.Settle(t), "default/plexus-importer"), "writes in a")
	require.Equal(t, writesA.Before, writesA.Versions(t))
}
