package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/otlpsink"
	"github.com/plexusnet/plexus/internal/testing/proctest"
	"github.com/plexusnet/plexus/internal/traceview"
)

// TestExportFlowIsOneConnectedTrace runs the allocator, membership for
// cluster a and the importer for cluster b as processes exporting OTLP to
// an in-test receiver, exports a Service with a Pod from a, and follows
// the importer's EndpointSlice write back: it is a child of the importer's
// reconcile, whose trace also holds the BatchAllocate call of the VIPs
// (client span in the importer, server span in the allocator), and the
// reconcile links to membership's span of the change it carried.
func TestExportFlowIsOneConnectedTrace(t *testing.T) {
	sink, err := otlpsink.Start("127.0.0.1:0", 100000)
	require.NoError(t, err)
	t.Cleanup(sink.Stop)
	otel := proctest.WithEnv("OTEL_EXPORTER_OTLP_ENDPOINT=http://"+sink.Addr(), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_TRACES_EXPORTER=otlp", "OTEL_METRICS_EXPORTER=none", "OTEL_BSP_SCHEDULE_DELAY=500")

	etcd := kubetest.StartEtcd(t)
	a := kubetest.StartAPIServer(t, etcd, kubetest.WithName("a"), kubetest.WithEtcdPrefix("/cluster-a"))
	b := kubetest.StartAPIServer(t, etcd, kubetest.WithName("b"), kubetest.WithEtcdPrefix("/cluster-b"))
	kubetest.InstallCRDs(t, a.Config, b.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	alloc := proctest.Start(t, proctest.Build(t, "./services/allocator"), []string{"--store", "memory"}, otel)
	conn, err := dial.New(alloc.GRPCAddr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = allocatorv1.NewAllocatorServiceClient(conn).CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "vips", Pool: &allocatorv1.Pool{Cidrs: []string{"10.96.4.0/24"}}})
	require.NoError(t, err)
	members := proctest.Start(t, proctest.Build(t, "./services/membership"),
		[]string{"--cluster-name=a", "--kubeconfig=" + a.Kubeconfig, "--allocator-addr=" + alloc.GRPCAddr}, otel)
	importer := proctest.Start(t, proctest.Build(t, "./services/importer"),
		[]string{"--cluster-name=b", "--kubeconfig=" + b.Kubeconfig, "--allocator-addr=" + alloc.GRPCAddr,
			"--source=a=" + members.GRPCAddr, "--vip-pool=vips", "--leader-elect=false"}, otel)

	kubeA, kubeB := kubernetes.NewForConfigOrDie(a.Config), kubernetes.NewForConfigOrDie(b.Config)
	for _, k := range []kubernetes.Interface{kubeA, kubeB} {
		_, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err = kubeA.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "cart", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "cart"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod, err := kubeA.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cart-0", Namespace: "shop", Labels: map[string]string{"app": "cart"}},
		Spec: corev1.PodSpec{NodeName: "node-0", Containers: []corev1.Container{{Name: "app", Image: "cart:1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.10", PodIPs: []corev1.PodIP{{IP: "10.244.0.10"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	_, err = kubeA.CoreV1().Pods("shop").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = mcsclient.NewForConfigOrDie(a.Config).MulticlusterV1beta1().ServiceExports("shop").Create(ctx,
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "cart", Namespace: "shop"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		list, err := kubeB.DiscoveryV1().EndpointSlices("shop").List(ctx, metav1.ListOptions{LabelSelector: mcsnames.LabelManagedBy + "=" + mcsnames.ManagedBy})
		return err == nil && len(list.Items) == 1 && len(list.Items[0].Endpoints) == 1
	}, time.Minute, 50*time.Millisecond, "the import reaches cluster b")

	// The flow of the slice's creation, once its spans have arrived.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("importer log:\n%s\nmembership log:\n%s", importer.Log(), members.Log())
		}
	})
	var flow, path []otlpsink.Span
	require.Eventually(t, func() bool {
		spans := sink.Spans()
		for _, sp := range spans {
			if sp.Service == "plexus-importer" && sp.Name == "kube POST endpointslices" {
				flow = traceview.Flow(spans, sp)
				path = upstream(spans, sp, "plexus-membership")
				return path != nil && has(flow, "plexus-membership", "membership.reconcile") && has(flow, "plexus-allocator", batchAllocate)
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "the spans of the flow arrive")
	tree := traceview.Tree(flow)
	t.Logf("the export's flow:\n%s", tree)
	t.Logf("from the slice write back to membership: %s", names(path))

	byID := map[string]otlpsink.Span{}
	for _, sp := range flow {
		byID[sp.SpanID] = sp
	}
	find := func(service, name string) otlpsink.Span {
		for _, sp := range flow {
			if sp.Service == service && sp.Name == name {
				return sp
			}
		}
		require.FailNow(t, "span missing", "%s %s in\n%s", service, name, tree)
		return otlpsink.Span{}
	}
	write := find("plexus-importer", "kube POST endpointslices")
	reconcile := byID[write.Parent]
	require.Equal(t, "importer.reconcile", reconcile.Name, "the slice write is a child of the reconcile:\n%s", tree)
	require.Equal(t, "cart", reconcile.Attrs["plexus.service"], "the reconcile names its service: %v", reconcile.Attrs)
	require.Equal(t, "shop", reconcile.Attrs["plexus.namespace"])

	server := find("plexus-allocator", batchAllocate)
	client := byID[server.Parent]
	require.Equal(t, "plexus-importer", client.Service, "the allocator's server span is a child of the importer's call:\n%s", tree)
	require.Equal(t, reconcile.SpanID, client.Parent, "the importer's call is a child of the reconcile:\n%s", tree)
	require.Equal(t, reconcile.TraceID, server.TraceID, "the VIP allocation is part of the reconcile's trace")

	observed := find("plexus-membership", "membership.reconcile")
	linked := false
	for _, l := range reconcile.Links {
		linked = linked || strings.HasPrefix(l, observed.TraceID+"/")
	}
	require.True(t, linked, "the importer's reconcile links to membership's trace of the change:\n%s", tree)
	require.Equal(t, "shop", observed.Attrs["k8s.namespace"], "membership's reconcile names its service: %v", observed.Attrs)
	require.Equal(t, "cart", observed.Attrs["k8s.service"])

	// Span by span, not only trace by trace: the slice write's parent is the
	// reconcile, whose link is the very membership span whose context the
	// WatchServices event carried (the observation of the change, or the
	// reconcile that published it when nothing was observed first).
	require.Len(t, path, 3, "write → reconcile → membership: %s\n%s", names(path), tree)
	require.Equal(t, reconcile.SpanID, path[1].SpanID, "the walk goes through the reconcile:\n%s", tree)
	origin := path[2]
	require.Contains(t, []string{"membership.observe", "membership.reconcile"}, origin.Name, "the link ends at membership's span of the change:\n%s", tree)
	require.Equal(t, observed.TraceID, origin.TraceID)
	require.Equal(t, "shop", origin.Attrs["k8s.namespace"], "membership's span is of the exported service's namespace: %v", origin.Attrs)
}

// upstream walks from one span to its parent and the spans it links to,
// breadth first, until it reaches a span of service; it returns the path
// (from, …, that span), or nil when no received span of service is
// upstream of from.
func upstream(spans []otlpsink.Span, from otlpsink.Span, service string) []otlpsink.Span {
	byID := map[string]otlpsink.Span{}
	for _, sp := range spans {
		byID[sp.TraceID+"/"+sp.SpanID] = sp
	}
	prev := map[string]string{}
	start := from.TraceID + "/" + from.SpanID
	seen := map[string]bool{start: true}
	queue := []string{start}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		sp := byID[id]
		if sp.Service == service {
			var path []otlpsink.Span
			for ; id != ""; id = prev[id] {
				path = append([]otlpsink.Span{byID[id]}, path...)
			}
			return path
		}
		next := append([]string(nil), sp.Links...)
		if sp.Parent != "" {
			next = append(next, sp.TraceID+"/"+sp.Parent)
		}
		for _, n := range next {
			if _, ok := byID[n]; ok && !seen[n] {
				seen[n], prev[n] = true, id
				queue = append(queue, n)
			}
		}
	}
	return nil
}

// names renders a path of spans as "service name → …".
func names(path []otlpsink.Span) string {
	out := make([]string, len(path))
	for i, sp := range path {
		out[i] = sp.Service + " " + sp.Name
	}
	return strings.Join(out, " → ")
}

// batchAllocate is the RPC of the clusterset VIPs: one per family, all or
// none.
const batchAllocate = "plexus.allocator.v1.AllocatorService/BatchAllocate"

func has(spans []otlpsink.Span, service, name string) bool {
	for _, sp := range spans {
		if sp.Service == service && sp.Name == name {
			return true
		}
	}
	return false
}
