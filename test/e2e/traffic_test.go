package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/testing/dataplane"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// helloScript answers every TCP connection on 8080 with the Pod's name,
// address and cluster, as the demo's service does.
const helloScript = `exec socat TCP-LISTEN:8080,fork,reuseaddr SYSTEM:'echo "hello from $POD_NAME at $POD_IP in cluster $CLUSTER"'`

// TestTrafficThroughClustersetVIP sends packets through what the importer
// writes: two clusters with the data plane (Pods in network namespaces of
// their own, kube-proxy in nftables mode, CoreDNS), the allocator, a
// membership and an importer per cluster. A Pod in cluster b connects to
// hello.shop.svc.clusterset.local, which CoreDNS resolves to the
// clusterset VIP, which kube-proxy in b forwards to the Pod in cluster a;
// the answer names that Pod. Exec goes through kube-apiserver over SPDY and
// WebSocket both. With a's Deployment at 0 the connection fails cleanly.
func TestTrafficThroughClustersetVIP(t *testing.T) {
	cs := startClusterset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	a, b, kubeA := cs.a, cs.b, cs.kubeA
	deployHello(ctx, t, kubeA, "a", 1, nil)
	cs.export(ctx, t, a, nil)
	startClientPod(ctx, t, cs.kubeB)

	var podName, podIP string
	require.Eventually(t, func() bool {
		pods, err := kubeA.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{LabelSelector: "app=hello"})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Status.PodIP == "" {
			return false
		}
		podName, podIP = pods.Items[0].Name, pods.Items[0].Status.PodIP
		return true
	}, time.Minute, 100*time.Millisecond, "cluster a runs the hello Pod")
	require.True(t, netip.MustParsePrefix("10.128.0.0/16").Contains(netip.MustParseAddr(podIP)), "a's Pod address %s comes from a's Pod range", podIP)

	want := fmt.Sprintf("hello from %s at %s in cluster a", podName, podIP)
	request := []string{"sh", "-c", "nc -v -w 2 hello.shop.svc.clusterset.local 80 </dev/null 2>&1"}
	for _, proto := range []dataplane.Protocol{dataplane.SPDY, dataplane.WebSocket} {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			out, stderr, err := dataplane.Exec(ctx, b.Config, "shop", "client", "", request, proto)
			require.NoError(c, err, "exec: %s", stderr)
			require.Contains(c, out, want)
		}, 2*time.Minute, 500*time.Millisecond, "a Pod in b reaches a's Pod through the clusterset VIP (protocol %d)", proto)
	}

	// The name is the VIP, and the VIP is what carried the packets: the
	// ServiceImport's address, programmed by kube-proxy in b.
	si, err := mcsclient.NewForConfigOrDie(b.Config).MulticlusterV1beta1().ServiceImports("shop").Get(ctx, "hello", metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, si.Spec.IPs, 1)
	out, _, err := dataplane.Exec(ctx, b.Config, "shop", "client", "", []string{"sh", "-c", "echo hi | nc -w 2 " + si.Spec.IPs[0] + " 80"}, dataplane.SPDY)
	require.NoError(t, err)
	require.Contains(t, out, want, "the VIP %s itself answers", si.Spec.IPs[0])

	// No endpoints left: the connection is refused (kube-proxy rejects
	// it), not hung, and no answer comes.
	scaleHello(ctx, t, kubeA, 0)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, _, _ := dataplane.Exec(ctx, b.Config, "shop", "client", "", request, dataplane.SPDY)
		require.NotContains(c, out, "hello from")
		require.Contains(c, out, "refused")
	}, time.Minute, 500*time.Millisecond, "with no Pod in a the connection fails cleanly")
}

// clusterset is two clusters with the data plane (a: Pods 10.128.0.0/16,
// Services 10.96.0.0/16; b: 10.129.0.0/16, 10.97.0.0/16), the allocator
// with a VIP pool outside both Service ranges, and a membership and an
// importer per cluster whose sources are both memberships; namespace
// shop exists in both.
type clusterset struct {
	a, b         *kubetest.Cluster
	kubeA, kubeB kubernetes.Interface
	members      map[string]*proctest.Proc
}

func startClusterset(t testing.TB) *clusterset {
	etcd := kubetest.StartEtcd(t)
	a := kubetest.StartAPIServer(t, etcd, kubetest.WithName("a"), kubetest.WithServiceClusterIPRange("10.96.0.0/16"))
	b := kubetest.StartAPIServer(t, etcd, kubetest.WithName("b"), kubetest.WithServiceClusterIPRange("10.97.0.0/16"))
	kubetest.InstallCRDs(t, a.Config, b.Config)
	kubetest.StartControllerManager(t, a)
	kubetest.StartControllerManager(t, b)
	dataplane.StartForTest(t, []dataplane.ClusterNet{
		dataplane.ClusterNetFor(a, 0, netip.MustParsePrefix("10.96.0.0/16")),
		dataplane.ClusterNetFor(b, 1, netip.MustParsePrefix("10.97.0.0/16")),
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	alloc := proctest.Start(t, proctest.Build(t, "./services/allocator"), []string{"--store", "memory"})
	conn, err := dial.New(alloc.GRPCAddr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = allocatorv1.NewAllocatorServiceClient(conn).CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "vips", Pool: &allocatorv1.Pool{Cidrs: []string{"10.250.0.0/24"}}})
	require.NoError(t, err)
	cs := &clusterset{a: a, b: b, kubeA: kubernetes.NewForConfigOrDie(a.Config), kubeB: kubernetes.NewForConfigOrDie(b.Config), members: map[string]*proctest.Proc{}}
	for _, c := range []*kubetest.Cluster{a, b} {
		cs.members[c.Name] = proctest.Start(t, proctest.Build(t, "./services/membership"),
			[]string{"--cluster-name=" + c.Name, "--kubeconfig=" + c.Kubeconfig, "--allocator-addr=" + alloc.GRPCAddr})
	}
	for _, c := range []*kubetest.Cluster{a, b} {
		proctest.Start(t, proctest.Build(t, "./services/importer"),
			[]string{"--cluster-name=" + c.Name, "--kubeconfig=" + c.Kubeconfig, "--allocator-addr=" + alloc.GRPCAddr,
				"--source=a=" + cs.members["a"].GRPCAddr, "--source=b=" + cs.members["b"].GRPCAddr, "--vip-pool=vips", "--leader-elect=false"})
	}
	for _, k := range []kubernetes.Interface{cs.kubeA, cs.kubeB} {
		_, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	return cs
}

// export makes the ServiceExport of shop/hello in c, with exported
// annotations.
func (cs *clusterset) export(ctx context.Context, t testing.TB, c *kubetest.Cluster, annotations map[string]string) {
	t.Helper()
	_, err := mcsclient.NewForConfigOrDie(c.Config).MulticlusterV1beta1().ServiceExports("shop").Create(ctx,
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop"},
			Spec: mcsv1beta1.ServiceExportSpec{ExportedAnnotations: annotations}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// deployHello makes the hello Deployment (replicas Pods answering on 8080)
// and its Service (port 80) in namespace shop.
// probe, when set, is each Pod's readiness probe.
func deployHello(ctx context.Context, t testing.TB, kube kubernetes.Interface, cluster string, replicas int32, probe *corev1.Probe) {
	t.Helper()
	labels := map[string]string{"app": "hello"}
	_, err := kube.AppsV1().Deployments("shop").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "hello", Image: "alpine/socat", Command: []string{"sh", "-c", helloScript}, ReadinessProbe: probe,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Env: []corev1.EnvVar{{Name: "CLUSTER", Value: cluster},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
			}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

func scaleHello(ctx context.Context, t testing.TB, kube kubernetes.Interface, replicas int32) {
	t.Helper()
	sc, err := kube.AppsV1().Deployments("shop").GetScale(ctx, "hello", metav1.GetOptions{})
	require.NoError(t, err)
	sc.Spec.Replicas = replicas
	_, err = kube.AppsV1().Deployments("shop").UpdateScale(ctx, "hello", sc, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// startClientPod runs a Pod "client" in shop that only waits, to exec into.
func startClientPod(ctx context.Context, t testing.TB, kube kubernetes.Interface) {
	t.Helper()
	_, err := kube.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: "shop"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "client", Image: "nicolaka/netshoot",
			Command: []string{"sh", "-c", "while :; do sleep 5; done"}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, err := kube.CoreV1().Pods("shop").Get(ctx, "client", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	}, time.Minute, 100*time.Millisecond, "the client Pod runs")
}
