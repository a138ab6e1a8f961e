package app_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	repairv1 "github.com/plexusnet/plexus/api/repair/v1"
	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	workloadclient "github.com/plexusnet/plexus/api/workload/v1alpha1/client"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/services/repair/app"
	"github.com/plexusnet/plexus/services/repair/internal/repairtest"
	rserver "github.com/plexusnet/plexus/services/repair/server"
)

// memberCluster is the --cluster-name of every repair the tests start.
const memberCluster = "member"

// kubeEnv is one real control plane shared by the tests of a run.
type kubeEnv struct {
	cfg       *rest.Config
	kube      kubernetes.Interface
	mcs       mcsclient.Interface
	workloads rest.Interface
}

func startKube(t testing.TB) *kubeEnv {
	t.Helper()
	etcd := kubetest.StartEtcd(t)
	c := kubetest.StartAPIServer(t, etcd, kubetest.WithName(memberCluster))
	kubetest.InstallCRDs(t, c.Config)
	mcs, err := mcsclient.NewForConfig(c.Config)
	require.NoError(t, err)
	wl, err := workloadclient.NewRESTClient(c.Config)
	require.NoError(t, err)
	return &kubeEnv{cfg: c.Config, kube: c.Clientset, mcs: mcs, workloads: wl}
}

var nsSeq atomic.Int64

// namespace creates a fresh namespace for one scenario.
func (e *kubeEnv) namespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("repair-%d", nsSeq.Add(1))
	_, err := e.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return name
}

func (e *kubeEnv) createPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := e.kube.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return p
}

// setPodIP sets the pod's IP through the status subresource, as a kubelet
// would.
func (e *kubeEnv) setPodIP(t *testing.T, p *corev1.Pod, ip string) {
	t.Helper()
	p = p.DeepCopy()
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = ip
	p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	_, err := e.kube.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
	require.NoError(t, err)
}

func (e *kubeEnv) deletePod(t *testing.T, ns, name string) {
	t.Helper()
	// No kubelet: a grace period would leave the object terminating.
	zero := int64(0)
	require.NoError(t, e.kube.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
}

func (e *kubeEnv) createWorkload(t *testing.T, ns, name, pool string) *workloadv1alpha1.ExternalWorkload {
	t.Helper()
	w, err := workloadclient.ForNamespace(e.workloads, ns).Create(context.Background(), &workloadv1alpha1.ExternalWorkload{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       workloadv1alpha1.ExternalWorkloadSpec{Pool: pool},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return w
}

// allocator is an allocator server on loopback with a memory store.
type allocator struct {
	addr   string
	client allocatorv1.AllocatorServiceClient
}

func startAllocator(t *testing.T) *allocator {
	t.Helper()
	a := repairtest.StartAllocator(t)
	return &allocator{addr: a.Addr, client: a.Client}
}

func (a *allocator) createPool(t *testing.T, id string, cidrs ...string) {
	t.Helper()
	_, err := a.client.CreatePool(context.Background(), &allocatorv1.CreatePoolRequest{PoolId: id, Pool: &allocatorv1.Pool{Cidrs: cidrs}})
	require.NoError(t, err)
}

// allocate allocates in pool for owner (optionally a given address).
func (a *allocator) allocate(t *testing.T, pool string, owner *allocatorv1.Owner, address string) *allocatorv1.Allocation {
	t.Helper()
	resp, err := a.client.Allocate(context.Background(), &allocatorv1.AllocateRequest{Pool: "pools/" + pool, Owner: owner, Address: address})
	require.NoError(t, err)
	return resp.GetAllocation()
}

// get returns the allocation at addr in pool, or nil when there is none.
func (a *allocator) get(t *testing.T, pool, addr string) *allocatorv1.Allocation {
	t.Helper()
	resp, err := a.client.GetAllocation(context.Background(), &allocatorv1.GetAllocationRequest{Name: "pools/" + pool + "/allocations/" + addr})
	if apierr.Reason(err) == "ALLOCATION_NOT_FOUND" {
		return nil
	}
	require.NoError(t, err)
	return resp.GetAllocation()
}

func podOwner(p *corev1.Pod) *allocatorv1.Owner {
	return &allocatorv1.Owner{Cluster: memberCluster, Kind: "Pod", Namespace: p.Namespace, Name: p.Name, Uid: string(p.UID)}
}

func workloadOwner(w *workloadv1alpha1.ExternalWorkload) *allocatorv1.Owner {
	return &allocatorv1.Owner{Cluster: memberCluster, Kind: "ExternalWorkload", Namespace: w.Namespace, Name: w.Name, Uid: string(w.UID)}
}

// repair is one repair service running in-process.
type repair struct {
	client   repairv1.RepairServiceClient
	grpcAddr string
	httpAddr string
	identity string
	stop     func()
}

// testOptions are the options of most scenarios: passes only on demand, a
// grace of one second, no leader election.
func testOptions() app.Options {
	o := app.DefaultOptions()
	o.Interval = time.Hour
	o.LeakGrace = time.Second
	o.LeaderElect = false
	return o
}

var repairSeq atomic.Int64

func startRepair(t *testing.T, e *kubeEnv, allocAddr string, o app.Options) *repair {
	t.Helper()
	id := fmt.Sprintf("repair-%d", repairSeq.Add(1))
	o = o.WithRESTConfig(e.cfg).WithIdentity(id)
	cfg := config.New(config.Repair)
	cfg.ClusterName, cfg.AllocatorAddr = memberCluster, allocAddr
	svc := servertest.Start(t, cfg, "repair", func(ctx context.Context, rt *server.Runtime) (func(), error) {
		return app.Setup(ctx, rt, o)
	})
	srv := svc.Server
	conn, err := dial.New(srv.GRPCAddr())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	r := &repair{client: repairv1.NewRepairServiceClient(conn), grpcAddr: srv.GRPCAddr(), httpAddr: srv.HTTPAddr(), identity: id, stop: svc.Stop}
	// Serving means the informers synced.
	require.Eventually(t, func() bool {
		resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: rserver.ServiceName})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}, 30*time.Second, 20*time.Millisecond, "repair never served")
	return r
}

// run runs a pass and returns its report with all its findings.
func (r *repair) run(t *testing.T, dryRun bool) (*repairv1.Report, []*repairv1.Finding) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := r.client.RunRepair(ctx, &repairv1.RunRepairRequest{DryRun: dryRun})
	require.NoError(t, err)
	findings := r.findings(t, &repairv1.ListFindingsRequest{})
	return resp.GetReport(), findings
}

func (r *repair) findings(t *testing.T, req *repairv1.ListFindingsRequest) []*repairv1.Finding {
	t.Helper()
	var out []*repairv1.Finding
	for range 1000 {
		resp, err := r.client.ListFindings(context.Background(), req)
		require.NoError(t, err)
		out = append(out, resp.GetFindings()...)
		if resp.GetNextPageToken() == "" {
			return out
		}
		req.PageToken = resp.GetNextPageToken()
	}
	t.Fatal("ListFindings never ended")
	return nil
}

// httpGet returns the body of a GET on the repair's HTTP port.
func (r *repair) httpGet(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + r.httpAddr + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// find returns the finding of kind about address (nil when none).
func find(fs []*repairv1.Finding, kind repairv1.FindingKind, address string) *repairv1.Finding {
	for _, f := range fs {
		if f.GetKind() == kind && f.GetAddress() == address {
			return f
		}
	}
	return nil
}

// about returns the findings about address.
func about(fs []*repairv1.Finding, address string) []*repairv1.Finding {
	var out []*repairv1.Finding
	for _, f := range fs {
		if f.GetAddress() == address {
			out = append(out, f)
		}
	}
	return out
}

// waitFinding runs dry passes (which change no strikes) until the finding
// shows up: the informers see a deletion a moment after the API does.
func (r *repair) waitFinding(t *testing.T, kind repairv1.FindingKind, address string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, fs := r.run(t, true)
		return find(fs, kind, address) != nil
	}, 20*time.Second, 50*time.Millisecond, "no %s finding for %s", kind, address)
}

// sleepPastGrace waits until the allocation is older than grace.
func sleepPastGrace(a *allocatorv1.Allocation, grace time.Duration) {
	if d := time.Until(a.GetCreateTime().AsTime().Add(grace + 50*time.Millisecond)); d > 0 {
		time.Sleep(d)
	}
}
