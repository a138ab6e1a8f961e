package app_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/services/importer/app"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// Bounds of every wait in these tests.
const (
	waitFor = 45 * time.Second
	tick    = 20 * time.Millisecond
)

// spans records every span of the process: the importer runs in-process
// on the global tracer provider, as telemetry.Setup installs it in the
// binary.
var spans = tracetest.NewSpanRecorder()

func init() {
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	otel.SetTextMapPropagator(propagation.TraceContext{})
}

// env is a member cluster (etcd and kube-apiserver, with the MCS CRDs) and
// an allocator process.
type env struct {
	cluster *kubetest.Cluster
	kube    kubernetes.Interface
	mcs     mcsclient.Interface
	alloc   allocatorv1.AllocatorServiceClient
	// allocAddr is the allocator's gRPC address.
	allocAddr string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	etcd := kubetest.StartEtcd(t)
	cluster := kubetest.StartAPIServer(t, etcd, kubetest.WithName("member"))
	kubetest.InstallCRDs(t, cluster.Config)
	mcs, err := mcsclient.NewForConfig(cluster.Config)
	require.NoError(t, err)
	proc := proctest.Start(t, proctest.Build(t, "./services/allocator"), []string{"--store", "memory"})
	conn, err := dial.New(proc.GRPCAddr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &env{cluster: cluster, kube: cluster.Clientset, mcs: mcs, alloc: allocatorv1.NewAllocatorServiceClient(conn), allocAddr: proc.GRPCAddr}
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) pool(t testing.TB, id string, cidrs ...string) {
	t.Helper()
	_, err := e.alloc.CreatePool(ctxFor(t), &allocatorv1.CreatePoolRequest{PoolId: id, Pool: &allocatorv1.Pool{Cidrs: cidrs}})
	require.NoError(t, err)
}

func (e *env) namespace(t testing.TB, name string) {
	t.Helper()
	_, err := e.kube.CoreV1().Namespaces().Create(ctxFor(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// importer is an importer running in-process.
type importer struct {
	api      importerv1.ImporterServiceClient
	health   healthpb.HealthClient
	registry *prometheus.Registry
	addr     string
	stop     func()
}

// options returns importer options for the env: its VIP pools and short
// leader election timings.
func (e *env) options(pools ...string) app.Options {
	o := app.DefaultOptions().WithRESTConfig(e.cluster.Config)
	o.VIPPools = pools
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 500*time.Millisecond
	return o
}

// startImporter runs an importer against the env with sources, until the
// test ends or stop is called.
func (e *env) startImporter(t testing.TB, o app.Options, srcs ...*sourcetest.Source) *importer {
	t.Helper()
	for _, s := range srcs {
		o.Sources = append(o.Sources, s.Cluster()+"="+s.Addr())
	}
	im := launchImporter(t, "member", e.allocAddr, o)
	im.waitServing(t)
	return im
}

// launchImporter sets an importer of cluster up in-process (o names the
// cluster's API server) against the allocator at allocAddr, without
// waiting for it to serve.
func launchImporter(t testing.TB, cluster, allocAddr string, o app.Options) *importer {
	t.Helper()
	cfg := config.New(config.Importer)
	cfg.ClusterName = cluster
	cfg.AllocatorAddr = allocAddr
	svc := servertest.Start(t, cfg, "importer", func(ctx context.Context, rt *server.Runtime) (func(), error) {
		return app.Setup(ctx, rt, o)
	})
	srv := svc.Server
	conn, err := dial.New(srv.GRPCAddr(), dial.WithoutRetry())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return &importer{api: importerv1.NewImporterServiceClient(conn), health: healthpb.NewHealthClient(conn),
		registry: srv.Registry(), addr: srv.GRPCAddr(), stop: svc.Stop}
}

// waitServing waits until the importer's API serves.
func (im *importer) waitServing(t testing.TB) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := im.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "plexus.importer.v1.ImporterService"})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}, waitFor, tick, "the importer did not become SERVING")
}

// counter returns the sum of a counter's series whose labels include
// match.
func counter(t *testing.T, reg *prometheus.Registry, name string, match map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelsMatch(m, match) {
				total += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return total
}

func labelsMatch(m *dto.Metric, match map[string]string) bool {
	for k, v := range match {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// gauge returns the value of a gauge without labels.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	require.Failf(t, "no such gauge", "%s", name)
	return 0
}

// idle waits until the importer has nothing left to do: every write it
// made is in its caches (whose events queue the services the writes
// touched), no service waits in the queue and none is being reconciled.
// Work moves through those stages in that order, so they are read in that
// order, between two reads of the writes that show none was made meanwhile.
func idle(t *testing.T, im *importer) {
	t.Helper()
	require.Eventually(t, func() bool {
		before := writes(t, im.registry)
		quiet := gauge(t, im.registry, "plexus_importer_unobserved_writes") == 0 &&
			gauge(t, im.registry, "plexus_importer_queue_depth") == 0 &&
			gauge(t, im.registry, "plexus_importer_reconciles_running") == 0
		return quiet && maps.Equal(before, writes(t, im.registry))
	}, waitFor, tick, "the importer did not become idle")
}

// writes returns the importer's Kubernetes writes so far, by "kind
// operation".
func writes(t testing.TB, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "plexus_importer_writes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var kind, op string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "kind":
					kind = l.GetValue()
				case "operation":
					op = l.GetValue()
				}
			}
			out[kind+" "+op] = m.GetCounter().GetValue()
		}
	}
	return out
}

func (e *env) serviceImport(ns, name string) (*mcsv1beta1.ServiceImport, error) {
	return e.mcs.MulticlusterV1beta1().ServiceImports(ns).Get(context.Background(), name, metav1.GetOptions{})
}

func (e *env) derived(ns, name string) (*corev1.Service, error) {
	return e.kube.CoreV1().Services(ns).Get(context.Background(), mcsnames.DerivedServiceName(name), metav1.GetOptions{})
}

// slicesOf lists the slices labelled with a multicluster service, sorted by
// name.
func (e *env) slicesOf(t *testing.T, ns, name string) []discovery.EndpointSlice {
	t.Helper()
	list, err := e.kube.DiscoveryV1().EndpointSlices(ns).List(context.Background(), metav1.ListOptions{LabelSelector: mcsnames.LabelMCSServiceName + "=" + name})
	require.NoError(t, err)
	slices.SortFunc(list.Items, func(a, b discovery.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	return list.Items
}

// endpointsIn counts endpoints in slices, by source cluster.
func endpointsIn(ss []discovery.EndpointSlice) map[string]int {
	out := map[string]int{}
	for _, s := range ss {
		out[s.Labels[mcsnames.LabelSourceCluster]] += len(s.Endpoints)
	}
	return out
}

// gone waits until the import of ns/name has no ServiceImport, derived
// Service or slices left.
func (e *env) gone(t *testing.T, ns, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err1 := e.serviceImport(ns, name)
		_, err2 := e.derived(ns, name)
		return apierrors.IsNotFound(err1) && apierrors.IsNotFound(err2) && len(e.slicesOf(t, ns, name)) == 0
	}, waitFor, tick, "the import of %s/%s was not removed", ns, name)
}

func condition(si *mcsv1beta1.ServiceImport, typ string) *metav1.Condition {
	for i := range si.Status.Conditions {
		if si.Status.Conditions[i].Type == typ {
			return &si.Status.Conditions[i]
		}
	}
	return nil
}

func importName(ns, name string) string {
	return fmt.Sprintf("namespaces/%s/serviceimports/%s", ns, name)
}

// get reads an import over gRPC.
func (im *importer) get(t *testing.T, ns, name string) *importerv1.ServiceImport {
	t.Helper()
	resp, err := im.api.GetServiceImport(ctxFor(t), &importerv1.GetServiceImportRequest{Name: importName(ns, name)})
	require.NoError(t, err)
	return resp.GetServiceImport()
}
