package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	aboutv1alpha1 "github.com/plexusnet/plexus/api/about/v1alpha1"
	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/deploy/policy"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/auth"
	"github.com/plexusnet/plexus/internal/certgen"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
	"github.com/plexusnet/plexus/internal/tlsconf"
)

// The fleet of the migration: clusterset east, member clusters a and b.
const (
	migrationSet  = "east"
	migrationWait = time.Minute
	migrationTick = 50 * time.Millisecond
)

var migrationClusters = []string{"a", "b"}

// migration is a fleet on mutual TLS with the policies of deploy/policy:
// an allocator on a bolt file, and in clusters a and b (two
// kube-apiservers on one etcd) a membership, an importer and a repair,
// each importer and repair following both memberships.
type migration struct {
	t        *testing.T
	ctx      context.Context
	dir      string            // the CA and every certificate
	policies map[string]string // service → policy file
	kube     map[string]*kubetest.Cluster
	alloc    *proctest.Proc
	procs    map[string]*proctest.Proc // "membership/a", "importer/b", ...
	health   proctest.Option
	// importers are the importers' APIs, as the fleet operator calls them.
	importers map[string]importerv1.ImporterServiceClient
}

// shared and bound name the files of the shared identity of service and
// of its identity in cluster.
func (m *migration) shared(service string) certgen.Paths { return certgen.For(m.dir, service) }
func (m *migration) bound(cluster, service string) certgen.Paths {
	return certgen.MemberFor(m.dir, cluster, service)
}

func (m *migration) tlsArgs(service string, p certgen.Paths) []string {
	return []string{"--tls-cert", p.Cert, "--tls-key", p.Key, "--tls-client-ca", p.CA, "--peer-ca", p.CA, "--authz-policy", m.policies[service]}
}

func (m *migration) allocatorArgs(extra ...string) []string {
	return slices.Concat([]string{"--store", "bolt:" + filepath.Join(m.dir, "allocator.db")}, m.tlsArgs("allocator", m.shared("allocator")), extra)
}

// args are the arguments of service in cluster presenting p.
func (m *migration) args(service, cluster string, p certgen.Paths, extra ...string) []string {
	args := slices.Concat([]string{"--cluster-name=" + cluster, "--kubeconfig=" + m.kube[cluster].Kubeconfig, "--allocator-addr=" + m.alloc.GRPCAddr},
		m.tlsArgs(service, p), extra)
	if service == "membership" {
		return args
	}
	for _, c := range migrationClusters {
		args = append(args, "--source="+c+"="+m.procs["membership/"+c].GRPCAddr)
	}
	if service == "importer" {
		return append(args, "--vip-pool=vips", "--leader-elect=false")
	}
	return append(args, "--leader-elect=false", "--interval=1s")
}

// as dials addr presenting p.
func (m *migration) as(addr string, p certgen.Paths) *grpcConn {
	conn, err := dial.New(addr, dial.WithoutRetry(), dial.WithTLSFiles(p.CA, p.Cert, p.Key))
	require.NoError(m.t, err)
	m.t.Cleanup(func() { _ = conn.Close() })
	return &grpcConn{alloc: allocatorv1.NewAllocatorServiceClient(conn), importer: importerv1.NewImporterServiceClient(conn),
		membership: membershipv1.NewMembershipServiceClient(conn)}
}

type grpcConn struct {
	alloc      allocatorv1.AllocatorServiceClient
	importer   importerv1.ImporterServiceClient
	membership membershipv1.MembershipServiceClient
}

func startMigration(t *testing.T, ctx context.Context) *migration {
	m := &migration{t: t, ctx: ctx, dir: t.TempDir(), policies: map[string]string{}, kube: map[string]*kubetest.Cluster{}, procs: map[string]*proctest.Proc{}}
	_, err := certgen.Generate(certgen.Options{Dir: m.dir})
	require.NoError(t, err)
	for _, c := range migrationClusters {
		_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: m.dir, Clusterset: migrationSet, Cluster: c})
		require.NoError(t, err)
	}
	_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: m.dir, Clusterset: migrationSet, Fleet: true})
	require.NoError(t, err)
	for _, svc := range []string{"allocator", "membership", "importer", "repair"} {
		data, err := policy.File(svc)
		require.NoError(t, err)
		m.policies[svc] = filepath.Join(m.dir, svc+"-policy.json")
		require.NoError(t, os.WriteFile(m.policies[svc], data, 0o600))
	}
	operator := m.bound("", certgen.Operator)
	healthTLS, err := tlsconf.Client(operator.CA, operator.Cert, operator.Key)
	require.NoError(t, err)
	m.health = proctest.WithHealthTLS(healthTLS)

	etcd := kubetest.StartEtcd(t)
	for _, c := range migrationClusters {
		m.kube[c] = kubetest.StartAPIServer(t, etcd, kubetest.WithName(c))
	}
	kubetest.InstallCRDs(t, m.kube["a"].Config, m.kube["b"].Config)
	for _, c := range migrationClusters {
		_, err := kubernetes.NewForConfigOrDie(m.kube[c].Config).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = dynamic.NewForConfigOrDie(m.kube[c].Config).Resource(aboutv1alpha1.ClusterPropertiesResource).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": aboutv1alpha1.SchemeGroupVersion.String(), "kind": "ClusterProperty",
			"metadata": map[string]any{"name": aboutv1alpha1.ClusterSetProperty}, "spec": map[string]any{"value": migrationSet},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	m.alloc = proctest.Start(t, proctest.Build(t, "./services/allocator"), m.allocatorArgs(), m.health)
	for _, id := range []string{"vips=10.250.0.0/24", "workloads=10.200.0.0/24"} {
		name, cidr, _ := strings.Cut(id, "=")
		_, err = m.as(m.alloc.GRPCAddr, m.shared(certgen.Operator)).alloc.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: name, Pool: &allocatorv1.Pool{Cidrs: []string{cidr}}})
		require.NoError(t, err)
	}
	for _, svc := range []string{"membership", "importer", "repair"} {
		for _, c := range migrationClusters {
			m.procs[svc+"/"+c] = proctest.Start(t, proctest.Build(t, "./services/"+svc), m.args(svc, c, m.shared(svc)), m.health)
		}
	}
	m.importers = map[string]importerv1.ImporterServiceClient{}
	for _, c := range migrationClusters {
		m.importers[c] = m.as(m.procs["importer/"+c].GRPCAddr, operator).importer
	}
	return m
}

// exportWeb makes shop/web in cluster a: a Service selecting the external
// workload w1, and its ServiceExport. It returns w1's address.
func (m *migration) exportWeb() string {
	cfg := m.kube["a"].Config
	_, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Services("shop").Create(m.ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}},
	}, metav1.CreateOptions{})
	require.NoError(m.t, err)
	_, err = mcsclient.NewForConfigOrDie(cfg).MulticlusterV1beta1().ServiceExports("shop").Create(m.ctx,
		&mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}}, metav1.CreateOptions{})
	require.NoError(m.t, err)
	return m.workload("w1")
}

// workload registers the external workload name of shop/web in cluster
// a, as the fleet operator, and returns the address membership a
// allocates for it from the workloads pool (with its own identity).
func (m *migration) workload(name string) string {
	resp, err := m.as(m.procs["membership/a"].GRPCAddr, m.bound("", certgen.Operator)).membership.RegisterWorkload(m.ctx, &membershipv1.RegisterWorkloadRequest{
		Workload: &membershipv1.Workload{Name: "namespaces/shop/workloads/" + name, Labels: map[string]string{"app": "web"},
			AddressPool: "pools/workloads", Ready: true, Ttl: durationpb.New(time.Hour),
			Ports: []*membershipv1.WorkloadPort{{Name: "http", Port: 8080}}},
		RequestId: "register-" + name,
	})
	require.NoError(m.t, err)
	require.Len(m.t, resp.GetWorkload().GetAddresses(), 1)
	return resp.GetWorkload().GetAddresses()[0]
}

// sliceWatch follows the importer's slices of shop/web in cluster b and
// records every moment one of the addresses it must hold is missing.
type sliceWatch struct {
	mu    sync.Mutex
	store cache.Store
	want  []string
	gaps  []string
}

func (w *sliceWatch) check(why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.want == nil {
		return
	}
	have := w.addresses()
	for _, a := range w.want {
		if !slices.Contains(have, a) {
			w.gaps = append(w.gaps, fmt.Sprintf("%s: %s missing from %v", why, a, have))
		}
	}
}

func (w *sliceWatch) addresses() []string {
	var out []string
	for _, obj := range w.store.List() {
		for _, ep := range obj.(*discoveryv1.EndpointSlice).Endpoints {
			out = append(out, ep.Addresses...)
		}
	}
	slices.Sort(out)
	return out
}

// watchSlices starts following b's slices of shop/web.
func (m *migration) watchSlices() *sliceWatch {
	factory := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(m.kube["b"].Config), 0, informers.WithNamespace("shop"),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = mcsnames.LabelMCSServiceName + "=web," + mcsnames.LabelManagedBy + "=" + mcsnames.ManagedBy
		}))
	inf := factory.Discovery().V1().EndpointSlices().Informer()
	w := &sliceWatch{store: inf.GetStore()}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, _ any) { w.check("update") },
		DeleteFunc: func(any) { w.check("delete") },
	})
	require.NoError(m.t, err)
	stop := make(chan struct{})
	m.t.Cleanup(func() { close(stop) })
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	return w
}

// expect waits until b's slices hold exactly want and, from then on,
// records a moment they miss one of them.
func (w *sliceWatch) expect(t *testing.T, want ...string) {
	t.Helper()
	slices.Sort(want)
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return slices.Equal(w.addresses(), want)
	}, migrationWait, migrationTick, "b's slices of shop/web hold %v", want)
	w.mu.Lock()
	w.want = want
	w.mu.Unlock()
}

func (w *sliceWatch) requireNoGaps(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	require.Empty(t, w.gaps, "b's slices of shop/web lost an address")
}

// readMetric sums the samples of name on p's /metrics whose labels
// contain every one of labels (`reason="X"`).
func readMetric(p *proctest.Proc, name string, labels ...string) (float64, error) {
	resp, err := metricsClient.Get("http://" + p.HTTPAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	re := regexp.MustCompile(`(?m)^` + name + `(\{[^}]*\})? (\S+)$`)
	sum := 0.0
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		if slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(m[1], l) }) {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		sum += v
	}
	return sum, nil
}

func metric(t *testing.T, p *proctest.Proc, name string, labels ...string) float64 {
	t.Helper()
	v, err := readMetric(p, name, labels...)
	require.NoError(t, err)
	return v
}

// certPrincipal is the principal a certificate file names.
func certPrincipal(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	id, _, err := auth.CertIdentity(data)
	require.NoError(t, err)
	return id.Principal
}

// holds checks the fleet after a step: b imports shop/web with the VIP
// it had from the start, both importers follow both memberships and see
// them under the identities in memberships, every repair ends its passes,
// and nothing was refused anywhere.
func (m *migration) holds(step string, si *mcsv1beta1.ServiceImport, memberships map[string]string, w *sliceWatch) {
	t := m.t
	t.Helper()
	got, err := mcsclient.NewForConfigOrDie(m.kube["b"].Config).MulticlusterV1beta1().ServiceImports("shop").Get(m.ctx, "web", metav1.GetOptions{})
	require.NoError(t, err, step)
	require.Equal(t, si.UID, got.UID, "%s: the ServiceImport was not replaced", step)
	require.Equal(t, si.Spec.IPs, got.Spec.IPs, "%s: the VIP stays", step)
	for _, c := range migrationClusters {
		var refused []string
		require.Eventually(t, func() bool {
			resp, err := m.importers[c].ListSources(m.ctx, &importerv1.ListSourcesRequest{})
			if err != nil {
				return false
			}
			ok := 0
			for _, s := range resp.GetSources() {
				if s.GetState() == importerv1.SourceState_SOURCE_STATE_REFUSED {
					refused = append(refused, s.GetCluster()+": "+s.GetRefusalReason())
				}
				if s.GetState() == importerv1.SourceState_SOURCE_STATE_CONNECTED && s.GetPeerIdentity() == memberships[s.GetCluster()] {
					ok++
				}
			}
			return len(refused) > 0 || ok == len(migrationClusters)
		}, migrationWait, migrationTick, "%s: importer %s follows both memberships under %v", step, c, memberships)
		require.Empty(t, refused, "%s: importer %s refused a source", step, c)
		require.Zero(t, metric(t, m.procs["importer/"+c], "plexus_importer_source_refusals_total"), "%s: importer %s refused a source", step, c)
		repair := m.procs["repair/"+c]
		before := metric(t, repair, "plexus_repair_passes_total", `state="COMPLETE"`)
		require.Eventually(t, func() bool {
			n, err := readMetric(repair, "plexus_repair_passes_total", `state="COMPLETE"`)
			return err == nil && n > before
		}, migrationWait, migrationTick, "%s: repair %s completes a pass", step, c)
	}
	require.Zero(t, metric(t, m.alloc, "plexus_allocator_refusals_total"), "%s: the allocator refused a call", step)
	w.requireNoGaps(t)
}

// TestMoveToClusterIdentities follows docs/security.md's move of a
// running fleet from the shared identities to per-cluster ones: every
// service starts with the shared certificate and cluster a exports
// shop/web (an external workload whose address membership a allocates)
// to b. Cluster a's services, then b's, are restarted one at a time with
// their cluster's certificates; after each restart b still imports
// shop/web with the same ServiceImport and VIP, b's slices never lose
// the address, both importers see each membership under the identity it
// presents, repairs complete their passes and nothing is refused
// (plexus_allocator_refusals_total, plexus_importer_source_refusals_total,
// no "call refused" or "source refused" in any log). Then the allocator
// (with --clusterset) and the importers require per-cluster identities:
// the import holds, a new workload of a reaches b, and a shared
// certificate is refused with SHARED_IDENTITY_REFUSED.
func TestMoveToClusterIdentities(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	m := startMigration(t, ctx)
	w := m.watchSlices()
	addr := m.exportWeb()
	w.expect(t, addr)
	si, err := mcsclient.NewForConfigOrDie(m.kube["b"].Config).MulticlusterV1beta1().ServiceImports("shop").Get(ctx, "web", metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, si.Spec.IPs, 1, "the import has its clusterset VIP")

	memberships := map[string]string{}
	for _, c := range migrationClusters {
		memberships[c] = certPrincipal(t, m.shared("membership").Cert)
	}
	m.holds("shared identities", si, memberships, w)
	for _, c := range migrationClusters {
		for _, svc := range []string{"membership", "importer", "repair"} {
			m.procs[svc+"/"+c].Stop()
			m.procs[svc+"/"+c].RestartWith(m.args(svc, c, m.bound(c, svc)))
			if svc == "membership" {
				memberships[c] = auth.ClusterPrincipal(certgen.TrustDomain, migrationSet, c, "membership")
			}
			m.holds(svc+" of "+c+" with its cluster's identity", si, memberships, w)
		}
	}

	m.alloc.Stop()
	m.alloc.RestartWith(m.allocatorArgs("--clusterset", migrationSet, "--require-cluster-identities"))
	for _, c := range migrationClusters {
		m.procs["importer/"+c].Stop()
		m.procs["importer/"+c].RestartWith(m.args("importer", c, m.bound(c, "importer"), "--require-cluster-identities"))
	}
	m.holds("cluster identities required", si, memberships, w)
	w.expect(t, addr, m.workload("w2"))
	for _, p := range append(slices.Collect(maps.Values(m.procs)), m.alloc) {
		for _, refusal := range []string{"call refused", "source refused", "call denied"} {
			require.NotContains(t, p.Log(), refusal)
		}
	}

	_, err = m.as(m.alloc.GRPCAddr, m.shared(certgen.Operator)).alloc.ListAllocations(ctx, &allocatorv1.ListAllocationsRequest{Pool: "pools/workloads"})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Equal(t, "SHARED_IDENTITY_REFUSED", apierr.Reason(err))
	_, err = m.as(m.alloc.GRPCAddr, m.shared("membership")).alloc.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/workloads",
		Owner: &allocatorv1.Owner{Cluster: "a", Kind: "ExternalWorkload", Namespace: "shop", Name: "w3", Uid: "uid-w3"}})
	require.Equal(t, "SHARED_IDENTITY_REFUSED", apierr.Reason(err), "%v", err)
	require.Equal(t, 2.0, metric(t, m.alloc, "plexus_allocator_refusals_total", `reason="SHARED_IDENTITY_REFUSED"`))
	require.Contains(t, m.alloc.Log(), "spiffe://plexus.local/operator", "the audit line names the refused identity")
	w.requireNoGaps(t)
}
