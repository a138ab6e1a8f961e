package upgrade

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// cluster is one member cluster: a real kube-apiserver with the CRDs.
type cluster struct {
	*kubetest.Cluster
	kube kubernetes.Interface
	mcs  mcsclient.Interface
}

// startClusters starts clusters a (Services 10.96.0.0/16) and b
// (10.97.0.0/16) on one etcd, with the CRDs of this tree if crds.
func startClusters(t *testing.T, crds bool) (a, b *cluster) {
	t.Helper()
	etcd := kubetest.StartEtcd(t)
	ka := kubetest.StartAPIServer(t, etcd, kubetest.WithName("a"), kubetest.WithServiceClusterIPRange("10.96.0.0/16"))
	kb := kubetest.StartAPIServer(t, etcd, kubetest.WithName("b"), kubetest.WithServiceClusterIPRange("10.97.0.0/16"))
	if crds {
		kubetest.InstallCRDs(t, ka.Config, kb.Config)
	}
	wrap := func(c *kubetest.Cluster) *cluster {
		return &cluster{Cluster: c, kube: kubernetes.NewForConfigOrDie(c.Config), mcs: mcsclient.NewForConfigOrDie(c.Config)}
	}
	return wrap(ka), wrap(kb)
}

// service is one running Plexus service of a fleet: which build runs it
// and with which arguments, so that another build can take its place.
type service struct {
	name, cluster string
	build         *Build
	args          []string
	proc          *proctest.Proc
}

func startService(t *testing.T, name, cluster string, b *Build, args []string) *service {
	t.Helper()
	s := &service{name: name, cluster: cluster, build: b, args: args}
	s.proc = proctest.Start(t, b.Service(name), args)
	return s
}

// replace stops the service and starts build b of it with the same
// arguments on the same addresses, as a rollout of a new image does.
func (s *service) replace(t *testing.T, b *Build) {
	t.Helper()
	s.proc.Stop()
	s.build = b
	s.proc = proctest.Start(t, b.Service(s.name), s.args, proctest.WithAddrs(s.proc.GRPCAddr, s.proc.HTTPAddr))
}

// createVIPPool makes the pool of clusterset VIPs, outside both
// clusters' Service ranges.
func createVIPPool(ctx context.Context, t *testing.T, alloc *proctest.Proc) {
	t.Helper()
	_, err := allocClient(t, alloc.GRPCAddr, "").CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "vips", Pool: &allocatorv1.Pool{Cidrs: []string{"10.250.0.0/24"}}})
	require.NoError(t, err)
}

func membershipArgs(c *cluster, alloc *proctest.Proc) []string {
	return []string{"--cluster-name=" + c.Name, "--kubeconfig=" + c.Kubeconfig, "--allocator-addr=" + alloc.GRPCAddr}
}

// importerArgs are an importer's (or, with repair, a repair's) arguments
// in c, following the memberships of sources.
func importerArgs(c *cluster, alloc *proctest.Proc, sources map[string]*service, repair bool) []string {
	args := []string{"--cluster-name=" + c.Name, "--kubeconfig=" + c.Kubeconfig, "--allocator-addr=" + alloc.GRPCAddr, "--leader-elect=false"}
	for _, name := range sortedKeys(sources) {
		args = append(args, "--source="+name+"="+sources[name].proc.GRPCAddr)
	}
	if repair {
		return append(args, "--interval=1s")
	}
	return append(args, "--vip-pool=vips")
}

// exportWeb makes Service web in namespace ns of c, backed by a ready
// Pod at each of ips, and its ServiceExport.
func exportWeb(ctx context.Context, t *testing.T, c *cluster, ns string, ips ...string) {
	t.Helper()
	createNamespace(ctx, t, c, ns)
	_, err := c.kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	for _, ip := range ips {
		addPod(ctx, t, c, ns, ip)
	}
	_, err = c.mcs.MulticlusterV1beta1().ServiceExports(ns).Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// createNamespace makes namespace ns in c: an import goes only into a
// namespace that exists (namespace sameness).
func createNamespace(ctx context.Context, t *testing.T, c *cluster, ns string) {
	t.Helper()
	_, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// addPod makes a Pod of web at ip and gives it the status a kubelet
// would write for a running, ready Pod.
func addPod(ctx context.Context, t *testing.T, c *cluster, ns, ip string) {
	t.Helper()
	pods := c.kube.CoreV1().Pods(ns)
	p, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-" + strings.ReplaceAll(ip, ".", "-"), Namespace: ns, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, ip, []corev1.PodIP{{IP: ip}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// webSlices lists the importer's EndpointSlices of web in namespace ns.
func webSlices(ctx context.Context, c *cluster, ns string) ([]map[string]any, error) {
	list, err := c.kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
		LabelSelector: mcsnames.LabelMCSServiceName + "=web," + mcsnames.LabelManagedBy + "=" + mcsnames.ManagedBy})
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	for i := range list.Items {
		out = append(out, normalize(&list.Items[i]))
	}
	return out, nil
}

// webAddresses are the endpoint addresses of webSlices, sorted.
func webAddresses(slices []map[string]any) []string {
	var addrs []string
	for _, s := range slices {
		eps, _ := s["endpoints"].([]any)
		for _, ep := range eps {
			for _, a := range ep.(map[string]any)["addresses"].([]any) {
				addrs = append(addrs, a.(string))
			}
		}
	}
	sort.Strings(addrs)
	return addrs
}

// waitServed waits until b imports web of namespace ns with a clusterset
// VIP and exactly the endpoints ips, and returns the VIP.
func waitServed(ctx context.Context, t *testing.T, b *cluster, ns string, ips []string, why string) string {
	t.Helper()
	want := slices.Clone(ips)
	sort.Strings(want)
	var vip string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		si, err := b.mcs.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, "web", metav1.GetOptions{})
		require.NoError(c, err)
		require.Len(c, si.Spec.IPs, 1)
		vip = si.Spec.IPs[0]
		got, err := webSlices(ctx, b, ns)
		require.NoError(c, err)
		require.Equal(c, want, webAddresses(got))
	}, 30*time.Second, 20*time.Millisecond, "%s: b imports %s/web with endpoints %v", why, ns, want)
	return vip
}

// imported is what an export of web from a leaves, normalized: the
// ServiceImport and EndpointSlices in b, the ServiceExport's status in a.
type imported struct {
	ServiceImport map[string]any
	Slices        []map[string]any
	ExportStatus  map[string]any
}

func readImported(ctx context.Context, t *testing.T, a, b *cluster, alloc *proctest.Proc, ns string) imported {
	t.Helper()
	var out imported
	si, err := b.mcs.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	out.ServiceImport = normalize(si)
	out.Slices, err = webSlices(ctx, b, ns)
	require.NoError(t, err)
	sort.Slice(out.Slices, func(i, j int) bool { return fmt.Sprint(out.Slices[i]) < fmt.Sprint(out.Slices[j]) })
	se, err := a.mcs.MulticlusterV1beta1().ServiceExports(ns).Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	out.ExportStatus = normalize(se)["status"].(map[string]any)
	// The VIP is the one address the allocator holds for the import;
	// which address of the pool it is may differ.
	vips := listAllocations(ctx, t, allocClient(t, alloc.GRPCAddr, ""), "pools/vips")
	require.Len(t, vips, 1, "the allocator holds one VIP: %v", vips)
	ips, _ := out.ServiceImport["spec"].(map[string]any)["ips"].([]any)
	require.Equal(t, []any{vips[0].GetAddress()}, ips, "the ServiceImport's VIP is the allocator's")
	replaceString(out.ServiceImport, vips[0].GetAddress(), "VIP")
	return out
}

// normalize is obj as JSON-like maps without what differs between two
// equal runs: ids, versions, times, managed fields, namespaces and a
// generated name.
func normalize(obj runtime.Object) map[string]any {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		panic(err)
	}
	md := m["metadata"].(map[string]any)
	for _, k := range []string{"resourceVersion", "creationTimestamp", "managedFields", "generation"} {
		delete(md, k)
	}
	if _, ok := md["generateName"]; ok {
		delete(md, "name")
	}
	strip(m)
	return m
}

// strip removes, at any depth, the keys whose values differ between
// equal runs: uids, namespaces (each run has its own), condition times.
func strip(v any) {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range []string{"uid", "namespace", "lastTransitionTime"} {
			delete(v, k)
		}
		for _, e := range v {
			strip(e)
		}
	case []any:
		for _, e := range v {
			strip(e)
		}
	}
}

// replaceString replaces old by new in every string of v, at any depth.
func replaceString(v any, old, new string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = replaceString(e, old, new)
		}
	case []any:
		for i, e := range v {
			v[i] = replaceString(e, old, new)
		}
	case string:
		return strings.ReplaceAll(v, old, new)
	}
	return v
}

// TestMixedReleases: one fleet of two clusters runs, in turn, this tree's
// membership in a and importer in b, the release's membership with this
// tree's importer, and this tree's membership with the release's
// importer. Each time a exports web with two ready endpoints; the
// ServiceImport and EndpointSlices in b and the ServiceExport's status in
// a are those of the matched versions.
func TestMixedReleases(t *testing.T) {
	rel, cur := release(t), current(t)
	a, b := startClusters(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ips := []string{"10.128.0.10", "10.128.0.11"}
	var want imported
	for i, pair := range [][2]*Build{{cur, cur}, {rel, cur}, {cur, rel}} {
		name := fmt.Sprintf("membership %s, importer %s", pair[0].Name, pair[1].Name)
		t.Run(name, func(t *testing.T) {
			// A fleet of its own each time: the allocator, a's
			// membership and b's importer.
			alloc := proctest.Start(t, cur.Allocator, []string{"--store", "memory"})
			createVIPPool(ctx, t, alloc)
			m := startService(t, "membership", "a", pair[0], membershipArgs(a, alloc))
			startService(t, "importer", "b", pair[1], importerArgs(b, alloc, map[string]*service{"a": m}, false))
			ns := fmt.Sprintf("mixed-%d", i)
			createNamespace(ctx, t, b, ns)
			exportWeb(ctx, t, a, ns, ips...)
			waitServed(ctx, t, b, ns, ips, name)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				se, err := a.mcs.MulticlusterV1beta1().ServiceExports(ns).Get(ctx, "web", metav1.GetOptions{})
				require.NoError(c, err)
				require.True(c, meta.IsStatusConditionTrue(se.Status.Conditions, "Ready"), "conditions %v", se.Status.Conditions)
			}, 30*time.Second, 20*time.Millisecond, "%s: the ServiceExport is Ready", name)
			got := readImported(ctx, t, a, b, alloc, ns)
			if i == 0 {
				want = got
			} else {
				require.Equal(t, want, got, "%s: the fleet's objects differ from the matched versions'", name)
			}
			// Unexported, the import goes from b: the next fleet starts
			// with no import of this one's.
			require.NoError(t, a.mcs.MulticlusterV1beta1().ServiceExports(ns).Delete(ctx, "web", metav1.DeleteOptions{}))
			require.Eventually(t, func() bool {
				_, err := b.mcs.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, "web", metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			}, 30*time.Second, 20*time.Millisecond, "%s: the unexported import leaves b", name)
		})
	}
}
