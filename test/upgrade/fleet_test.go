package upgrade

import (
	"context"
	"fmt"
	"path/filepath"
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
	"github.com/plexusnet/plexus/internal/certgen"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
	"github.com/plexusnet/plexus/internal/tlsconf"
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
	opts          []proctest.Option
	proc          *proctest.Proc
}

// startService runs build b of service name in cluster ("" for the
// allocator) with args and that identity's mutual TLS.
func startService(t *testing.T, p *fleetPKI, name, cluster string, b *Build, args []string) *service {
	t.Helper()
	s := &service{name: name, cluster: cluster, build: b, args: args, opts: []proctest.Option{p.env(cluster, name), p.health(t)}}
	s.proc = proctest.Start(t, b.Service(name), args, s.opts...)
	return s
}

// replace stops the service and starts build b of it with the same
// arguments on the same addresses, as a rollout of a new image does.
func (s *service) replace(t *testing.T, b *Build) {
	t.Helper()
	s.proc.Stop()
	s.build = b
	s.proc = proctest.Start(t, b.Service(s.name), s.args, append(s.opts, proctest.WithAddrs(s.proc.GRPCAddr, s.proc.HTTPAddr))...)
}

// fleetPKI is the fleet's mutual TLS, as deploy/ runs it: a CA, the
// identities of clusterset "cs" for clusters a and b and for the fleet
// (the operator), the allocator's, and the authorization policies of
// deploy/policy.
type fleetPKI struct{ dir, policies string }

func newPKI(t *testing.T) *fleetPKI {
	t.Helper()
	root, err := moduleRoot()
	require.NoError(t, err)
	p := &fleetPKI{dir: t.TempDir(), policies: filepath.Join(root, "deploy", "policy")}
	_, err = certgen.Generate(certgen.Options{Dir: p.dir})
	require.NoError(t, err)
	for _, c := range []string{"a", "b"} {
		_, err := certgen.GenerateMember(certgen.MemberOptions{Dir: p.dir, Clusterset: "cs", Cluster: c})
		require.NoError(t, err)
	}
	_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: p.dir, Clusterset: "cs", Fleet: true})
	require.NoError(t, err)
	return p
}

func (p *fleetPKI) ca() string { return filepath.Join(p.dir, "ca.crt") }

// env is the mutual TLS and policy of service in cluster ("": the
// allocator's own identity).
func (p *fleetPKI) env(cluster, service string) proctest.Option {
	id := certgen.MemberFor(p.dir, cluster, service)
	if cluster == "" {
		id = certgen.For(p.dir, service)
	}
	return proctest.WithEnv("PLEXUS_TLS_CERT="+id.Cert, "PLEXUS_TLS_KEY="+id.Key, "PLEXUS_TLS_CLIENT_CA="+p.ca(),
		"PLEXUS_PEER_CA="+p.ca(), "PLEXUS_AUTHZ_POLICY="+filepath.Join(p.policies, service+".json"))
}

// operator is the fleet operator's certificate.
func (p *fleetPKI) operator() certgen.Paths { return certgen.MemberFor(p.dir, "", certgen.Operator) }

func (p *fleetPKI) health(t *testing.T) proctest.Option {
	op := p.operator()
	cfg, err := tlsconf.Client(p.ca(), op.Cert, op.Key)
	require.NoError(t, err)
	return proctest.WithHealthTLS(cfg)
}

// allocator is an allocator client with the operator's identity.
func (p *fleetPKI) allocator(t *testing.T, alloc *proctest.Proc) allocatorv1.AllocatorServiceClient {
	op := p.operator()
	return allocClient(t, alloc.GRPCAddr, "", dial.WithTLSFiles(p.ca(), op.Cert, op.Key))
}

// allocatorArgs are the allocator's: clusterset cs, cluster identities
// required, the store.
func allocatorArgs(store string) []string {
	return []string{"--store", store, "--clusterset", "cs", "--require-cluster-identities"}
}

// createVIPPool makes the pool of clusterset VIPs, outside both
// clusters' Service ranges.
func createVIPPool(ctx context.Context, t *testing.T, p *fleetPKI, alloc *proctest.Proc) {
	t.Helper()
	_, err := p.allocator(t, alloc).CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "vips", Pool: &allocatorv1.Pool{Cidrs: []string{"10.250.0.0/24"}}})
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

func readImported(ctx context.Context, t *testing.T, a, b *cluster, p *fleetPKI, alloc *proctest.Proc, ns string) imported {
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
	// The VIP is the one address the allocator holds, for the clusterset
	// service; which address of the pool it is may differ. Any other
	// allocation is a VIP the importer took for a service it was not
	// given, which nothing but repair would give back.
	allocs := listAllocations(ctx, t, p.allocator(t, alloc), "pools/vips")
	require.Len(t, allocs, 1, "the allocator holds the one VIP of %s/web: %v", ns, allocs)
	o := allocs[0].GetOwner()
	require.True(t, o.GetKind() == "ClusterSetService" && o.GetNamespace() == ns && o.GetName() == "web", "the VIP's owner is %s/web: %v", ns, o)
	vip := allocs[0].GetAddress()
	ips, _ := out.ServiceImport["spec"].(map[string]any)["ips"].([]any)
	require.Equal(t, []any{vip}, ips, "the ServiceImport's VIP is the allocator's")
	replaceString(out.ServiceImport, vip, "VIP")
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

// TestMixedReleases: three fleets of two clusters run, in turn, this
// tree's membership in a and importer in b, the release's membership with
// this tree's importer, and this tree's membership with the release's
// importer. Each time a exports web with two ready endpoints; the
// ServiceImport and EndpointSlices in b and the ServiceExport's status in
// a are those of the matched versions, and the allocator holds that
// import's VIP and no other.
func TestMixedReleases(t *testing.T) {
	rel, cur := release(t), current(t)
	pki := newPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ips := []string{"10.128.0.10", "10.128.0.11"}
	var want imported
	for i, pair := range [][2]*Build{{cur, cur}, {rel, cur}, {cur, rel}} {
		name := fmt.Sprintf("membership %s, importer %s", pair[0].Name, pair[1].Name)
		t.Run(name, func(t *testing.T) {
			// A fleet of its own each time, on clusters of its own: the
			// allocator, a's membership and b's importer. Nothing a fleet
			// leaves reaches the next: when one fails before it unexports,
			// its ServiceExport stays, and on shared clusters the next
			// fleet's importer would import it and take a VIP for it.
			a, b := startClusters(t, true)
			alloc := startService(t, pki, "allocator", "", cur, allocatorArgs("memory")).proc
			createVIPPool(ctx, t, pki, alloc)
			m := startService(t, pki, "membership", "a", pair[0], membershipArgs(a, alloc))
			startService(t, pki, "importer", "b", pair[1], importerArgs(b, alloc, map[string]*service{"a": m}, false))
			ns := fmt.Sprintf("mixed-%d", i)
			createNamespace(ctx, t, b, ns)
			exportWeb(ctx, t, a, ns, ips...)
			waitServed(ctx, t, b, ns, ips, name)
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				se, err := a.mcs.MulticlusterV1beta1().ServiceExports(ns).Get(ctx, "web", metav1.GetOptions{})
				require.NoError(c, err)
				require.True(c, meta.IsStatusConditionTrue(se.Status.Conditions, "Ready"), "conditions %v", se.Status.Conditions)
				si, err := b.mcs.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, "web", metav1.GetOptions{})
				require.NoError(c, err)
				require.True(c, meta.IsStatusConditionTrue(si.Status.Conditions, "Ready"), "conditions %v", si.Status.Conditions)
				require.Equal(c, si.Generation, meta.FindStatusCondition(si.Status.Conditions, "Ready").ObservedGeneration)
			}, 30*time.Second, 20*time.Millisecond, "%s: the ServiceExport and the ServiceImport are Ready", name)
			got := readImported(ctx, t, a, b, pki, alloc, ns)
			if i == 0 {
				want = got
			} else {
				require.Equal(t, want, got, "%s: the fleet's objects differ from the matched versions'", name)
			}
			// Unexported, the import goes from b.
			require.NoError(t, a.mcs.MulticlusterV1beta1().ServiceExports(ns).Delete(ctx, "web", metav1.DeleteOptions{}))
			require.Eventually(t, func() bool {
				_, err := b.mcs.MulticlusterV1beta1().ServiceImports(ns).Get(ctx, "web", metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			}, 30*time.Second, 20*time.Millisecond, "%s: the unexported import leaves b", name)
		})
	}
}
