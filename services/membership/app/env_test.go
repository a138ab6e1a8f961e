package app_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	workloadclient "github.com/plexusnet/plexus/api/workload/v1alpha1/client"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
	"github.com/plexusnet/plexus/services/membership/app"
)

// clusterName is the --cluster-name of the membership under test.
const clusterName = "test-cluster"

// env is a Kubernetes control plane, an allocator and a membership service,
// all real, and clients of each.
type env struct {
	cluster   *kubetest.Cluster
	kube      kubernetes.Interface
	mcs       mcsclient.Interface
	workloads rest.Interface
	alloc     allocatorv1.AllocatorServiceClient
	api       membershipv1.MembershipServiceClient
	health    healthpb.HealthClient
	// addr is membership's gRPC address.
	addr string
}

func init() {
	// Real span contexts and W3C propagation, as telemetry.Setup installs
	// them in the binaries, so events carry a trace context.
	otel.SetTracerProvider(sdktrace.NewTracerProvider())
	otel.SetTextMapPropagator(propagation.TraceContext{})
}

// startControlPlane starts etcd and a kube-apiserver, without CRDs.
func startControlPlane(tb testing.TB) *kubetest.Cluster {
	tb.Helper()
	etcd := kubetest.StartEtcd(tb)
	return kubetest.StartAPIServer(tb, etcd, kubetest.WithName("membership"))
}

// loopback returns the configuration of a service on free loopback ports.
func loopback(svc config.Service) *config.Common {
	cfg := config.New(svc)
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	return cfg
}

// run runs a server until the test ends.
func run(tb testing.TB, srv *server.Server, cleanup func()) {
	if cleanup != nil {
		tb.Cleanup(cleanup) // cleanups run last first: after the server stopped
	}
	servertest.Serve(tb, srv)
}

func startAllocator(tb testing.TB) string {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	st := memory.New()
	svc, err := allocation.New(ctx, st)
	require.NoError(tb, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(*loopback(config.Allocator), "allocator",
		server.WithLogger(logger), server.WithoutSignalHandling(), server.WithDrainDelay(0))
	require.NoError(tb, err)
	allocserver.New(svc, allocserver.NewMetrics(srv.Registry(), svc)).Register(srv.GRPC())
	run(tb, srv, func() { _ = st.Close() })
	return srv.GRPCAddr()
}

// startMembership runs membership in-process against the cluster and the
// allocator, and returns a connection to it and its address.
func startMembership(tb testing.TB, restCfg *rest.Config, allocatorAddr string, opts app.Options) (*grpc.ClientConn, string) {
	tb.Helper()
	cfg := config.New(config.Membership)
	cfg.ClusterName = clusterName
	cfg.AllocatorAddr = allocatorAddr
	srv := servertest.Start(tb, cfg, "membership", func(ctx context.Context, rt *server.Runtime) (func(), error) {
		return app.Setup(ctx, rt, opts.WithRESTConfig(restCfg))
	}).Server
	conn, err := dial.New(srv.GRPCAddr(), dial.WithoutRetry())
	require.NoError(tb, err)
	tb.Cleanup(func() { conn.Close() })
	return conn, srv.GRPCAddr()
}

func newEnv(tb testing.TB, cluster *kubetest.Cluster, allocatorAddr string, opts app.Options) *env {
	tb.Helper()
	e := &env{cluster: cluster, kube: cluster.Clientset}
	var err error
	e.mcs, err = mcsclient.NewForConfig(cluster.Config)
	require.NoError(tb, err)
	e.workloads, err = workloadclient.NewRESTClient(cluster.Config)
	require.NoError(tb, err)
	aconn, err := dial.New(allocatorAddr)
	require.NoError(tb, err)
	tb.Cleanup(func() { aconn.Close() })
	e.alloc = allocatorv1.NewAllocatorServiceClient(aconn)
	conn, addr := startMembership(tb, cluster.Config, allocatorAddr, opts)
	e.addr = addr
	e.api = membershipv1.NewMembershipServiceClient(conn)
	e.health = healthpb.NewHealthClient(conn)
	return e
}

func (e *env) serving(ctx context.Context) healthpb.HealthCheckResponse_ServingStatus {
	resp, err := e.health.Check(ctx, &healthpb.HealthCheckRequest{Service: "plexus.membership.v1.MembershipService"})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN
	}
	return resp.GetStatus()
}

func (e *env) namespace(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	_, err := e.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

func (e *env) service(t *testing.T, ctx context.Context, ns, name string, selector map[string]string, targetPort string) *corev1.Service {
	t.Helper()
	svc, err := e.kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: selector,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString(targetPort), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return svc
}

func (e *env) pod(t *testing.T, ctx context.Context, ns, name string, labels map[string]string, port int32) *corev1.Pod {
	t.Helper()
	p, err := e.kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: "app",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port, Protocol: corev1.ProtocolTCP}},
		}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return p
}

// podStatus sets a Pod's IP and readiness as a kubelet would.
func (e *env) podStatus(t testing.TB, ctx context.Context, ns, name, ip string, ready bool) {
	t.Helper()
	pods := e.kube.CoreV1().Pods(ns)
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	setPodStatus(p, ip, ready)
	_, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
}

func setPodStatus(p *corev1.Pod, ip string, ready bool) {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = ip
	p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
}

func (e *env) relabel(t *testing.T, ctx context.Context, ns, name string, labels map[string]string) {
	t.Helper()
	pods := e.kube.CoreV1().Pods(ns)
	p, err := pods.Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	p.Labels = labels
	_, err = pods.Update(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// watcher reads a WatchServices stream in the background.
type watcher struct {
	events chan *membershipv1.WatchServicesResponse
	err    chan error
	cancel context.CancelFunc
}

func (e *env) watch(t testing.TB, req *membershipv1.WatchServicesRequest) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := e.api.WatchServices(ctx, req)
	require.NoError(t, err)
	w := &watcher{events: make(chan *membershipv1.WatchServicesResponse, 4096), err: make(chan error, 1), cancel: cancel}
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				w.err <- err
				return
			}
			w.events <- ev
		}
	}()
	t.Cleanup(cancel)
	return w
}

// next returns the next event, failing the test after timeout.
func (w *watcher) next(t testing.TB, timeout time.Duration) *membershipv1.WatchServicesResponse {
	t.Helper()
	select {
	case ev := <-w.events:
		return ev
	case err := <-w.err:
		t.Fatalf("watch ended: %v", err)
	case <-time.After(timeout):
		t.Fatalf("no watch event within %s", timeout)
	}
	return nil
}
