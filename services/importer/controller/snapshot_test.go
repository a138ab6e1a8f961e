package controller

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/kube"
	islices "github.com/plexusnet/plexus/services/importer/slices"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// importer is a controller with its store, caches and writer, as one
// importer process has them.
type importer struct {
	ctrl  *Controller
	store *exports.Store
}

// newImporter builds an importer of the member cluster behind kc and mcs
// memberCluster starts a member cluster (a real kube-apiserver with the
// MCS CRDs) with a namespace "ns", and returns its clients.
func memberCluster(ctx context.Context, t *testing.T) (kubernetes.Interface, mcsclient.Interface) {
	etcd := kubetest.StartEtcd(t)
	cluster := kubetest.StartAPIServer(t, etcd, kubetest.WithName("member"), kubetest.WithServiceClusterIPRange("10.0.0.0/24"))
	kubetest.InstallCRDs(t, cluster.Config)
	mcs, err := mcsclient.NewForConfig(cluster.Config)
	require.NoError(t, err)
	_, err = cluster.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return cluster.Clientset, mcs
}

// whose sources are clusters, and starts its caches until ctx ends.
func newImporter(ctx context.Context, t *testing.T, kc kubernetes.Interface, mcs mcsclient.Interface, alloc allocatorv1.AllocatorServiceClient, clusters ...string) *importer {
	t.Helper()
	im := &importer{}
	im.store = exports.New(func(ch exports.Change) {
		if im.ctrl != nil {
			im.ctrl.Changed(ch)
		}
	})
	for _, c := range clusters {
		im.store.AddSource(c)
	}
	tracker := kube.NewTracker(0)
	inf, err := kube.NewInformers(kc, mcs, tracker)
	require.NoError(t, err)
	w, err := kube.NewWriter(kc, mcs, tracker, prometheus.NewRegistry())
	require.NoError(t, err)
	packer, err := islices.New()
	require.NoError(t, err)
	im.ctrl, err = New(Config{Store: im.store, Informers: inf, Tracker: tracker, Writer: w, Kube: kc,
		Allocator: alloc, VIPPools: []string{"v4"}, Packer: packer})
	require.NoError(t, err)
	require.NoError(t, inf.AddHandlers(kube.Handlers{Service: im.ctrl.Enqueue, Namespace: im.ctrl.EnqueueNamespace}))
	inf.Start(ctx)
	return im
}

// idle reports whether the controller has nothing queued or running.
func (c *Controller) idle() bool { return c.queueLen() == 0 && c.running.Load() == 0 }

// gatedAlloc is a fakeAlloc whose BatchAllocate, once closed, waits until
// the test opens it again.
type gatedAlloc struct {
	*fakeAlloc
	asked chan struct{}
	gate  chan struct{}
}

func (g *gatedAlloc) BatchAllocate(ctx context.Context, req *allocatorv1.BatchAllocateRequest, opts ...grpc.CallOption) (*allocatorv1.BatchAllocateResponse, error) {
	select {
	case g.asked <- struct{}{}:
	default:
	}
	<-g.gate
	return g.fakeAlloc.BatchAllocate(ctx, req, opts...)
}

// TestSnapshotDuringReconcileDeletesNothing: a restarted importer
// reconciles a service while a source's snapshot lands. The reconcile read
// the exports before that source's, and must not take the source, synced
// by the time it plans the slices, for one that withdrew the service: its
// slice stays as it is. Before, the slice was deleted as an orphan and
// created again by the next reconcile.
func TestSnapshotDuringReconcileDeletesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kc, mcs := memberCluster(ctx, t)
	exportsOf := map[string]*exports.Update{
		"a": {Endpoints: sourcetest.Endpoints("ns", "x", []string{"http=80"}, "192.168.1.1")},
		"b": {Endpoints: sourcetest.Endpoints("ns", "x", []string{"http=80"}, "192.168.2.1")},
	}
	sliceOf := func(cl string) string {
		list, err := kc.DiscoveryV1().EndpointSlices("ns").List(ctx, metav1.ListOptions{LabelSelector: mcsnames.LabelSourceCluster + "=" + cl})
		require.NoError(t, err)
		if len(list.Items) != 1 {
			return ""
		}
		s := list.Items[0]
		return s.Name + "@" + s.ResourceVersion + " " + fmtEndpoints(s)
	}

	// The first process imports x from a and b.
	alloc := &fakeAlloc{owned: map[string]string{}}
	ctx1, stop1 := context.WithCancel(ctx)
	first := newImporter(ctx1, t, kc, mcs, alloc, "a", "b")
	for cl, u := range exportsOf {
		_, err := first.store.Replace(cl, exports.OriginWatch, []exports.Update{*u})
		require.NoError(t, err)
	}
	done := make(chan struct{})
	go func() { first.ctrl.Run(ctx1); close(done) }()
	require.Eventually(t, func() bool { return sliceOf("a") != "" && sliceOf("b") != "" }, 30*time.Second, 20*time.Millisecond)
	require.Eventually(t, first.ctrl.idle, 30*time.Second, 20*time.Millisecond)
	before := sliceOf("b")
	stop1()
	<-done

	// The restarted process has a's snapshot when its term starts; b's
	// lands while x's reconcile waits for the allocator, after it read
	// the exports.
	gated := &gatedAlloc{fakeAlloc: alloc, asked: make(chan struct{}, 1), gate: make(chan struct{})}
	second := newImporter(ctx, t, kc, mcs, gated, "a", "b")
	_, err := second.store.Replace("a", exports.OriginWatch, []exports.Update{*exportsOf["a"]})
	require.NoError(t, err)
	go second.ctrl.Run(ctx)
	<-gated.asked
	_, err = second.store.Replace("b", exports.OriginWatch, []exports.Update{*exportsOf["b"]})
	require.NoError(t, err)
	close(gated.gate)
	src, ok := second.store.Source("b")
	require.True(t, ok && src.Synced)
	require.Eventually(t, func() bool { return second.ctrl.Running() && second.ctrl.idle() }, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, before, sliceOf("b"), "b's slice was written")
}

func fmtEndpoints(s discovery.EndpointSlice) string {
	var out string
	for _, e := range s.Endpoints {
		out += e.Addresses[0] + ","
	}
	return out
}
