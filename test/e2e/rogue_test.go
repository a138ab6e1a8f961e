package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/certgen"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
	"github.com/plexusnet/plexus/internal/tlsconf"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// rogueFleet is a clusterset "cs" of three clusters with per-cluster
// identities: a exports, b imports, and c is compromised. c's membership
// is a fake that streams what an attacker wants, with c's valid
// certificate; c's other credentials call the fleet's services directly.
type rogueFleet struct {
	certs         string
	alloc         *proctest.Proc
	membershipA   *proctest.Proc
	importerB     *proctest.Proc
	kubeA, kubeB  kubernetes.Interface
	sourcesFile   string
	rogue         *sourcetest.Source
	memberA, vipB string // the allocations of a's workload and of the import's VIP
}

// conn dials addr with the certificate of identity (certgen.MemberFor's
// cluster and service), and closes the connection when the test ends.
func (f *rogueFleet) conn(t *testing.T, addr, cluster, service string) *grpc.ClientConn {
	t.Helper()
	p := certgen.MemberFor(f.certs, cluster, service)
	if cluster == "" && service == "allocator" {
		p = certgen.For(f.certs, service)
	}
	c, err := dial.New(addr, dial.WithTLSFiles(filepath.Join(f.certs, "ca.crt"), p.Cert, p.Key), dial.WithoutRetry())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// serviceEnv is a service's mutual TLS and policy, with the certificate
// of cluster (the fleet's allocator certificate for "").
func (f *rogueFleet) serviceEnv(cluster, service string) proctest.Option {
	p := certgen.MemberFor(f.certs, cluster, service)
	if cluster == "" {
		p = certgen.For(f.certs, service)
	}
	ca := filepath.Join(f.certs, "ca.crt")
	root, _ := filepath.Abs("../..")
	return proctest.WithEnv("PLEXUS_TLS_CERT="+p.Cert, "PLEXUS_TLS_KEY="+p.Key, "PLEXUS_TLS_CLIENT_CA="+ca,
		"PLEXUS_PEER_CA="+ca, "PLEXUS_AUTHZ_POLICY="+filepath.Join(root, "deploy", "policy", service+".json"))
}

func (f *rogueFleet) healthTLS(t *testing.T) proctest.Option {
	op := certgen.MemberFor(f.certs, "", certgen.Operator)
	cfg, err := tlsconf.Client(filepath.Join(f.certs, "ca.crt"), op.Cert, op.Key)
	require.NoError(t, err)
	return proctest.WithHealthTLS(cfg)
}

// TestRogueMember: cluster c's services hold valid identities for c and
// try to release a's workload address and the clusterset VIP, allocate in
// a's name, register a workload with a's membership, watch every
// allocation, push an import for a, exhaust the VIP pool, export a
// namespace the clusterset policy keeps from them, push endpoints outside
// the ranges c declares, and claim to be a. Each is refused with its
// reason; a's and b's objects and allocations are as they were, and the
// import from a to b goes on.
func TestRogueMember(t *testing.T) {
	f := startRogueFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Through its stream, c exported shop/web from an address of its
	// own ranges and one of a's, and secret/db, which only a may export.
	f.waitSlices(t, ctx, "shop", func(addrs map[string][]string) bool {
		return slices.Equal(addrs["a"], []string{"10.128.0.10"}) && slices.Equal(addrs["c"], []string{"10.130.0.5"})
	}, "b imports a's endpoint and c's in-range one, and drops c's endpoint in a's range")
	require.Eventually(t, func() bool {
		return sample(f.importerB, "plexus_importer_dropped_endpoints_total", `reason="out_of_range"`) >= 1
	}, time.Minute, 50*time.Millisecond, "the importer counts the out-of-range endpoint: %s", metricLines(f.importerB, "plexus_importer_dropped"))
	require.Eventually(t, func() bool {
		return sample(f.importerB, "plexus_importer_policy_refusals_total", `reason="ExportNotPermitted"`) >= 1
	}, time.Minute, 50*time.Millisecond, "the importer counts the refused export: %s", metricLines(f.importerB, "plexus_importer_policy"))
	_, err := f.kubeB.CoreV1().Services("secret").Get(ctx, mcsnames.DerivedServiceName("db"), metav1.GetOptions{})
	require.Error(t, err, "c's export of a namespace only a may export made a derived Service in b")
	secret, err := f.kubeB.DiscoveryV1().EndpointSlices("secret").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, secret.Items, "c's export of a namespace only a may export made slices in b")

	before := f.objects(t, ctx)
	allocsBefore := f.allocations(t, ctx)

	// Over gRPC, with c's certificates.
	allocC := allocatorv1.NewAllocatorServiceClient(f.conn(t, f.alloc.GRPCAddr, "c", "membership"))
	allocCImporter := allocatorv1.NewAllocatorServiceClient(f.conn(t, f.alloc.GRPCAddr, "c", "importer"))
	allocCRepair := allocatorv1.NewAllocatorServiceClient(f.conn(t, f.alloc.GRPCAddr, "c", "repair"))
	refused := func(err error, code codes.Code, reason, what string) {
		t.Helper()
		require.Error(t, err, what)
		require.Equal(t, code, status.Code(err), "%s: %v", what, err)
		require.Equal(t, reason, apierr.Reason(err), "%s: %v", what, err)
	}
	_, err = allocC.Release(ctx, &allocatorv1.ReleaseRequest{Name: f.memberA})
	refused(err, codes.PermissionDenied, "OWNER_OUTSIDE_CLUSTER", "c's membership releases a's workload address")
	_, err = allocCRepair.Release(ctx, &allocatorv1.ReleaseRequest{Name: f.memberA})
	refused(err, codes.PermissionDenied, "OWNER_OUTSIDE_CLUSTER", "c's repair releases a's workload address")
	_, err = allocCRepair.Release(ctx, &allocatorv1.ReleaseRequest{Name: f.vipB})
	refused(err, codes.PermissionDenied, "FLEET_RIGHTS_REQUIRED", "c's repair releases the clusterset VIP")
	_, err = allocC.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/workloads",
		Owner: &allocatorv1.Owner{Cluster: "a", Kind: "ExternalWorkload", Namespace: "shop", Name: "vm-forged", Uid: "u-forged"}})
	refused(err, codes.PermissionDenied, "OWNER_OUTSIDE_CLUSTER", "c's membership allocates in a's name")
	watch, err := allocCImporter.WatchAllocations(ctx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/workloads"})
	if err == nil {
		_, err = watch.Recv()
	}
	// The policy gives an importer no watch (the allocator's rule would
	// refuse a member's identity one too: FLEET_RIGHTS_REQUIRED).
	refused(err, codes.PermissionDenied, "ACCESS_DENIED", "c's importer watches every owner's allocations")

	memberAFromC := membershipv1.NewMembershipServiceClient(f.conn(t, f.membershipA.GRPCAddr, "c", "membership"))
	_, err = memberAFromC.RegisterWorkload(ctx, &membershipv1.RegisterWorkloadRequest{})
	refused(err, codes.PermissionDenied, "ACCESS_DENIED", "c's membership registers a workload with a's membership")
	importerBFromC := importerv1.NewImporterServiceClient(f.conn(t, f.importerB.GRPCAddr, "c", "importer"))
	_, err = importerBFromC.ApplyImport(ctx, &importerv1.ApplyImportRequest{})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "c's importer pushes an import to b: %v", err)

	require.GreaterOrEqual(t, sample(f.alloc, "plexus_allocator_refusals_total", `reason="OWNER_OUTSIDE_CLUSTER"`), 3.0)
	log := f.alloc.Log()
	require.Contains(t, log, "call refused", "the allocator logs no audit line of a refusal")
	require.Contains(t, log, "spiffe://plexus.local/clusterset/cs/cluster/c/membership", "the audit line names the caller")

	// Through its stream: c's membership now says it serves a.
	impostor := sourcetest.StartTLS(t, "a", certgen.MemberFor(f.certs, "c", "membership").Cert, certgen.MemberFor(f.certs, "c", "membership").Key)
	impostor.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, "10.128.0.66"))
	f.writeSources(t, impostor.Addr())
	sources := importerv1.NewImporterServiceClient(f.conn(t, f.importerB.GRPCAddr, "", certgen.Operator))
	require.Eventually(t, func() bool {
		resp, err := sources.ListSources(ctx, &importerv1.ListSourcesRequest{})
		if err != nil {
			return false
		}
		for _, s := range resp.GetSources() {
			if s.GetCluster() == "c" && s.GetState() == importerv1.SourceState_SOURCE_STATE_REFUSED && s.GetRefusalReason() != "" {
				return strings.Contains(s.GetPeerIdentity(), "/cluster/c/")
			}
		}
		return false
	}, time.Minute, 50*time.Millisecond, "ListSources shows c refused for speaking as a")
	require.Eventually(t, func() bool {
		return sample(f.importerB, "plexus_importer_source_refusals_total", `source="c"`) >= 1
	}, 30*time.Second, 50*time.Millisecond, "the importer counts the refusal")

	// Nothing of a's or b's changed, and the import from a to b goes on.
	require.Equal(t, allocsBefore, f.allocations(t, ctx), "a's allocations or the VIP changed")
	after := f.objects(t, ctx)
	for k, rv := range before {
		if strings.HasPrefix(k, "EndpointSlice/") && strings.Contains(k, "@c") {
			continue // c's own slice: stale now, its to change
		}
		require.Equal(t, rv, after[k], "%s changed under c's attempts", k)
	}
	f.readyPod(t, ctx, "web-1", "10.128.0.11")
	f.waitSlices(t, ctx, "shop", func(addrs map[string][]string) bool {
		return slices.Equal(addrs["a"], []string{"10.128.0.10", "10.128.0.11"})
	}, "a's new endpoint reaches b")
	require.Zero(t, sample(f.alloc, "plexus_allocator_refusals_total", `reason="SHARED_IDENTITY_REFUSED"`),
		"a's or b's services were refused as shared identities")

	// c's importer may allocate VIPs, for the services it imports, up to
	// the pool's quota of one cluster; then it is refused, and the VIP
	// of a's service is still b's to have.
	var exhausted error
	for i := range 20 {
		_, exhausted = allocCImporter.BatchAllocate(ctx, &allocatorv1.BatchAllocateRequest{Requests: []*allocatorv1.AllocateRequest{{Pool: "pools/vips",
			Owner: &allocatorv1.Owner{Kind: mcsnames.OwnerKindClusterSetService, Namespace: "made-up", Name: fmt.Sprintf("svc-%d", i)}}}})
		if exhausted != nil {
			break
		}
	}
	refused(exhausted, codes.ResourceExhausted, "CLUSTER_QUOTA_EXCEEDED", "c's importer exhausts the VIP pool")
}

func startRogueFleet(t *testing.T) *rogueFleet {
	f := &rogueFleet{certs: t.TempDir()}
	_, err := certgen.Generate(certgen.Options{Dir: f.certs})
	require.NoError(t, err)
	for _, c := range []string{"a", "b", "c"} {
		_, err := certgen.GenerateMember(certgen.MemberOptions{Dir: f.certs, Clusterset: "cs", Cluster: c})
		require.NoError(t, err)
	}
	_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: f.certs, Clusterset: "cs", Fleet: true})
	require.NoError(t, err)

	etcd := kubetest.StartEtcd(t)
	a := kubetest.StartAPIServer(t, etcd, kubetest.WithName("a"), kubetest.WithEtcdPrefix("/cluster-a"))
	b := kubetest.StartAPIServer(t, etcd, kubetest.WithName("b"), kubetest.WithEtcdPrefix("/cluster-b"))
	kubetest.InstallCRDs(t, a.Config, b.Config)
	f.kubeA, f.kubeB = kubernetes.NewForConfigOrDie(a.Config), kubernetes.NewForConfigOrDie(b.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, k := range []kubernetes.Interface{f.kubeA, f.kubeB} {
		for _, ns := range []string{"shop", "secret"} {
			_, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			require.NoError(t, err)
		}
	}
	// Only a may export the secret namespace; b's copy of the policy is
	// the one b's importer reads.
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "policy.plexus.dev/v1alpha1", "kind": "ClusterSetPolicy",
		"metadata": map[string]any{"name": "clusterset"},
		"spec":     map[string]any{"rules": []any{map[string]any{"namespace": "secret", "exportFrom": []any{"a"}}}},
	}}
	_, err = dynamic.NewForConfigOrDie(b.Config).Resource(schema.GroupVersionResource{Group: "policy.plexus.dev", Version: "v1alpha1", Resource: "clustersetpolicies"}).
		Create(ctx, policy, metav1.CreateOptions{})
	require.NoError(t, err)

	f.alloc = proctest.Start(t, proctest.Build(t, "./services/allocator"),
		[]string{"--store", "bolt:" + filepath.Join(t.TempDir(), "alloc.db"), "--clusterset", "cs", "--require-cluster-identities"},
		f.serviceEnv("", "allocator"), f.healthTLS(t))
	operator := allocatorv1.NewAllocatorServiceClient(f.conn(t, f.alloc.GRPCAddr, "", certgen.Operator))
	for id, cidr := range map[string]string{"vips": "10.96.200.0/24", "workloads": "10.200.0.0/24"} {
		_, err := operator.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: id, Pool: &allocatorv1.Pool{Cidrs: []string{cidr}, ClusterQuota: 4}})
		require.NoError(t, err)
	}
	// a's membership holds an external workload's address, as it would.
	resp, err := allocatorv1.NewAllocatorServiceClient(f.conn(t, f.alloc.GRPCAddr, "a", "membership")).Allocate(ctx, &allocatorv1.AllocateRequest{
		Pool: "pools/workloads", Owner: &allocatorv1.Owner{Cluster: "a", Kind: "ExternalWorkload", Namespace: "shop", Name: "vm-1", Uid: "u-vm-1"}})
	require.NoError(t, err)
	f.memberA = resp.GetAllocation().GetName()

	f.membershipA = proctest.Start(t, proctest.Build(t, "./services/membership"),
		[]string{"--cluster-name=a", "--kubeconfig=" + a.Kubeconfig, "--allocator-addr=" + f.alloc.GRPCAddr},
		f.serviceEnv("a", "membership"), f.healthTLS(t))
	f.exportWeb(t, ctx, a)

	c := certgen.MemberFor(f.certs, "c", "membership")
	f.rogue = sourcetest.StartTLS(t, "c", c.Cert, c.Key)
	f.rogue.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, "10.130.0.5", "10.128.0.99"))
	f.rogue.Set(sourcetest.Endpoints("secret", "db", []string{"sql=5432"}, "10.130.0.6"))
	f.sourcesFile = filepath.Join(t.TempDir(), "sources.yaml")
	f.writeSources(t, f.rogue.Addr())
	f.importerB = proctest.Start(t, proctest.Build(t, "./services/importer"),
		[]string{"--cluster-name=b", "--kubeconfig=" + b.Kubeconfig, "--allocator-addr=" + f.alloc.GRPCAddr,
			"--sources-file=" + f.sourcesFile, "--vip-pool=vips", "--leader-elect=false", "--require-cluster-identities"},
		f.serviceEnv("b", "importer"), f.healthTLS(t))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("importer b log:\n%s\nallocator log:\n%s", f.importerB.Log(), f.alloc.Log())
		}
	})
	f.waitSlices(t, ctx, "shop", func(addrs map[string][]string) bool { return len(addrs["a"]) == 1 }, "the import from a reaches b")
	list, err := operator.ListAllocations(ctx, &allocatorv1.ListAllocationsRequest{Pool: "pools/vips"})
	require.NoError(t, err)
	require.Len(t, list.GetAllocations(), 1, "one VIP, shop/web's")
	f.vipB = list.GetAllocations()[0].GetName()
	return f
}

// writeSources writes b's inventory: a's membership, and c's at cAddr,
// each with the ranges its endpoints must lie in.
func (f *rogueFleet) writeSources(t *testing.T, cAddr string) {
	t.Helper()
	body := fmt.Sprintf("clusters:\n- name: a\n  address: %s\n  ranges: [10.128.0.0/16]\n- name: c\n  address: %s\n  ranges: [10.130.0.0/16]\n",
		f.membershipA.GRPCAddr, cAddr)
	tmp := f.sourcesFile + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(body), 0o644))
	require.NoError(t, os.Rename(tmp, f.sourcesFile))
}

// exportWeb makes shop/web in cluster a: a Service, one ready Pod and the
// ServiceExport.
func (f *rogueFleet) exportWeb(t *testing.T, ctx context.Context, a *kubetest.Cluster) {
	_, err := f.kubeA.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	f.readyPod(t, ctx, "web-0", "10.128.0.10")
	_, err = mcsclient.NewForConfigOrDie(a.Config).MulticlusterV1beta1().ServiceExports("shop").Create(ctx,
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

func (f *rogueFleet) readyPod(t *testing.T, ctx context.Context, name, ip string) {
	t.Helper()
	pod, err := f.kubeA.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "node-0", Containers: []corev1.Container{{Name: "app", Image: "web:1"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	_, err = f.kubeA.CoreV1().Pods("shop").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// waitSlices waits until ok holds for the addresses of the importer's
// slices in namespace ns of cluster b, by source cluster.
func (f *rogueFleet) waitSlices(t *testing.T, ctx context.Context, ns string, ok func(map[string][]string) bool, what string) {
	t.Helper()
	var last map[string][]string
	require.Eventually(t, func() bool {
		list, err := f.kubeB.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: mcsnames.LabelManagedBy + "=" + mcsnames.ManagedBy})
		if err != nil {
			return false
		}
		last = slicesBySource(list.Items)
		return ok(last)
	}, time.Minute, 50*time.Millisecond, "%s (last: %v)", what, last)
}

func slicesBySource(items []discoveryv1.EndpointSlice) map[string][]string {
	out := map[string][]string{}
	for _, s := range items {
		src := s.Labels[mcsnames.LabelSourceCluster]
		for _, ep := range s.Endpoints {
			out[src] = append(out[src], ep.Addresses...)
		}
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

// objects returns the resourceVersions of what Plexus keeps in a and b:
// ServiceImports, Services and EndpointSlices of both namespaces, and the
// ServiceExport in a.
func (f *rogueFleet) objects(t *testing.T, ctx context.Context) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, ns := range []string{"shop", "secret"} {
		for cluster, k := range map[string]kubernetes.Interface{"a": f.kubeA, "b": f.kubeB} {
			svcs, err := k.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			for _, s := range svcs.Items {
				out["Service/"+cluster+"/"+ns+"/"+s.Name] = s.ResourceVersion
			}
			eps, err := k.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			for _, s := range eps.Items {
				out["EndpointSlice/"+cluster+"/"+ns+"/"+s.Name+"@"+s.Labels[mcsnames.LabelSourceCluster]] = s.ResourceVersion
			}
		}
	}
	return out
}

// allocations returns every allocation's name and etag, as the fleet's
// operator lists them.
func (f *rogueFleet) allocations(t *testing.T, ctx context.Context) map[string]string {
	t.Helper()
	operator := allocatorv1.NewAllocatorServiceClient(f.conn(t, f.alloc.GRPCAddr, "", certgen.Operator))
	out := map[string]string{}
	for _, pool := range []string{"pools/vips", "pools/workloads"} {
		list, err := operator.ListAllocations(ctx, &allocatorv1.ListAllocationsRequest{Pool: pool})
		require.NoError(t, err)
		for _, a := range list.GetAllocations() {
			if a.GetOwner().GetNamespace() == "made-up" {
				continue // c's own VIPs, up to its quota
			}
			out[a.GetName()] = a.GetEtag()
		}
	}
	return out
}

// metricLines returns a process's metric lines starting with prefix.
func metricLines(p *proctest.Proc, prefix string) string {
	resp, err := http.Get("http://" + p.HTTPAddr + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			out = append(out, sc.Text())
		}
	}
	return strings.Join(out, "\n")
}

// sample is readMetric for a condition that polls: -1 while the process
// does not answer.
func sample(p *proctest.Proc, name, labels string) float64 {
	v, err := readMetric(p, name, labels)
	if err != nil {
		return -1
	}
	return v
}
