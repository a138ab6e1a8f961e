package app_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	workloadclient "github.com/plexusnet/plexus/api/workload/v1alpha1/client"
	"github.com/plexusnet/plexus/clients/plexusctl/cmd"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/services/membership/app"
)

const (
	upsertEv  = membershipv1.WatchEventType_WATCH_EVENT_TYPE_UPSERT
	deleteEv  = membershipv1.WatchEventType_WATCH_EVENT_TYPE_DELETE
	snapStart = membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_START
	snapEnd   = membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_END
	evTimeout = 10 * time.Second
)

// TestMembership runs membership in-process against a real kube-apiserver
// and a real allocator. The subtests share the control plane and run in
// order, each in its own namespace.
func TestMembership(t *testing.T) {
	cluster := startControlPlane(t)
	allocAddr := startAllocator(t)
	// Membership starts before the CRDs exist, so its informers cannot
	// sync until they are installed.
	e := newEnv(t, cluster, allocAddr, app.DefaultOptions())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)

	t.Run("not serving until synced", func(t *testing.T) {
		require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, e.serving(ctx))
		_, err := e.api.GetServiceMembers(ctx, &membershipv1.GetServiceMembersRequest{Service: "namespaces/default/services/kubernetes"})
		require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		require.Equal(t, "NOT_SYNCED", apierr.Reason(err))
		stream, err := e.api.WatchServices(ctx, &membershipv1.WatchServicesRequest{})
		require.NoError(t, err)
		_, err = stream.Recv() // a stream's status arrives with the first Recv
		require.Equal(t, "NOT_SYNCED", apierr.Reason(err), "%v", err)

		kubetest.InstallCRDs(t, cluster.Config)
		require.Eventually(t, func() bool { return e.serving(ctx) == healthpb.HealthCheckResponse_SERVING },
			30*time.Second, 50*time.Millisecond, "membership never became SERVING")
		got, err := e.api.GetServiceMembers(ctx, &membershipv1.GetServiceMembersRequest{Service: "namespaces/default/services/kubernetes"})
		require.NoError(t, err, "services existing at start-up are there once serving")
		require.Equal(t, clusterName, got.GetEndpoints().GetCluster())
	})
	if t.Failed() {
		return
	}

	var lifecycleEnd position
	t.Run("pod lifecycle", func(t *testing.T) { lifecycleEnd = testPodLifecycle(ctx, t, e) })
	t.Run("resume", func(t *testing.T) { testResume(ctx, t, e, lifecycleEnd) })
	t.Run("exported only", func(t *testing.T) { testExportedOnly(ctx, t, e) })
	t.Run("bursts coalesce", func(t *testing.T) { testBurst(ctx, t, e) })
	t.Run("heartbeat ttl", func(t *testing.T) { testHeartbeatTTL(ctx, t, e) })
	t.Run("allocation released on deregistration", func(t *testing.T) { testAllocation(ctx, t, e) })
	t.Run("concurrent registrations", func(t *testing.T) { testConcurrentRegistrations(ctx, t, e) })
	t.Run("bad input writes nothing", func(t *testing.T) { testBadInput(ctx, t, e) })
	t.Run("an address that cannot be recorded leaves nothing", func(t *testing.T) { testUnrecordableAddress(ctx, t, e) })
	t.Run("register races deregister", func(t *testing.T) { testRegisterDeregisterRace(ctx, t, e) })
	t.Run("label limits", func(t *testing.T) { testLabelLimits(ctx, t, e) })
	t.Run("address conflicts", func(t *testing.T) { testAddressConflicts(ctx, t, e) })
	t.Run("plain errors", func(t *testing.T) { testPlainErrors(ctx, t, e) })
	t.Run("export status", func(t *testing.T) { testExportStatus(ctx, t, e) })
	t.Run("export policy", func(t *testing.T) { testExportPolicy(ctx, t, e) })
	t.Run("list workloads", func(t *testing.T) { testListWorkloads(ctx, t, e) })
	t.Run("plexusctl", func(t *testing.T) { testPlexusctl(ctx, t, e) })
}

// position is where a watcher left off.
type position struct {
	epoch    string
	revision uint64
}

// expectUpsert reads the next event and checks it is an upsert of service
// with a newer revision, an observation time and a trace context.
func expectUpsert(t *testing.T, w *watcher, service string, after uint64) *membershipv1.WatchServicesResponse {
	t.Helper()
	ev := w.next(t, evTimeout)
	require.Equal(t, upsertEv, ev.GetType(), "%v", ev)
	require.Equal(t, service, ev.GetEndpoints().GetService())
	require.Greater(t, ev.GetRevision(), after)
	require.NotNil(t, ev.GetObserveTime())
	require.WithinDuration(t, time.Now(), ev.GetObserveTime().AsTime(), time.Minute)
	require.Contains(t, ev.GetTraceContext(), "traceparent")
	return ev
}

// endpointsOf flattens an endpoint set to "kind/name addr port ready serving
// [terminating]".
func endpointsOf(se *membershipv1.ServiceEndpoints) []string {
	var out []string
	for _, g := range se.GetGroups() {
		var ports []string
		for _, p := range g.GetPorts() {
			ports = append(ports, fmt.Sprint(p.GetPort()))
		}
		for _, ep := range g.GetEndpoints() {
			s := fmt.Sprintf("%s/%s %s %s ready=%t serving=%t",
				ep.GetTargetRef().GetKind(), ep.GetTargetRef().GetName(), strings.Join(ep.GetAddresses(), ","),
				strings.Join(ports, ","), ep.GetConditions().GetReady(), ep.GetConditions().GetServing())
			if ep.GetConditions().GetTerminating() {
				s += " terminating"
			}
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// untilMembers reads upserts of service until one has the wanted members.
func untilMembers(t *testing.T, w *watcher, service string, want []string) *membershipv1.WatchServicesResponse {
	t.Helper()
	var rev uint64
	for range 10 {
		ev := expectUpsert(t, w, service, rev)
		if slices.Equal(endpointsOf(ev.GetEndpoints()), want) {
			return ev
		}
		rev = ev.GetRevision()
	}
	t.Fatalf("%s never had members %v", service, want)
	return nil
}

func waitMembers(ctx context.Context, t *testing.T, e *env, service string, want []string) *membershipv1.GetServiceMembersResponse {
	t.Helper()
	var got *membershipv1.GetServiceMembersResponse
	require.Eventually(t, func() bool {
		resp, err := e.api.GetServiceMembers(ctx, &membershipv1.GetServiceMembersRequest{Service: service})
		if err != nil {
			return false
		}
		got = resp
		return slices.Equal(endpointsOf(resp.GetEndpoints()), want)
	}, evTimeout, 20*time.Millisecond, "members of %s never became %v (last %v)", service, want, endpointsOf(got.GetEndpoints()))
	return got
}

func testPodLifecycle(ctx context.Context, t *testing.T, e *env) position {
	const ns = "lifecycle"
	web := "namespaces/" + ns + "/services/web"
	e.namespace(t, ctx, ns)
	e.service(t, ctx, ns, "web", map[string]string{"app": "web"}, "http")
	waitMembers(ctx, t, e, web, nil)

	w := e.watch(t, &membershipv1.WatchServicesRequest{Namespace: ns})
	start := w.next(t, evTimeout)
	require.Equal(t, snapStart, start.GetType())
	require.NotEmpty(t, start.GetEpoch())
	snap := w.next(t, evTimeout)
	require.Equal(t, upsertEv, snap.GetType())
	require.Equal(t, web, snap.GetEndpoints().GetService())
	require.Empty(t, snap.GetEndpoints().GetGroups())
	require.Equal(t, start.GetRevision(), snap.GetRevision(), "snapshot events carry the snapshot's revision")
	end := w.next(t, evTimeout)
	require.Equal(t, snapEnd, end.GetType())
	rev := end.GetRevision()

	// A Pod without an IP has no endpoint yet: no event. Nor does a Pod
	// the Service does not select.
	e.pod(t, ctx, ns, "web-0", map[string]string{"app": "web"}, 8080)
	e.pod(t, ctx, ns, "other", map[string]string{"app": "other"}, 8080)
	e.podStatus(t, ctx, ns, "other", "10.1.0.9", true)
	// The first step below requires its change to be the next event: an
	// event of these would come before it and fail that step.

	steps := []struct {
		name   string
		change func()
		want   []string
		// via is a state the set may pass through first.
		via []string
	}{
		{"started and ready", func() { e.podStatus(t, ctx, ns, "web-0", "10.1.0.1", true) },
			[]string{"Pod/web-0 10.1.0.1 8080 ready=true serving=true"}, nil},
		{"relabelled out", func() { e.relabel(t, ctx, ns, "web-0", map[string]string{"app": "api"}) }, nil, nil},
		{"relabelled back", func() { e.relabel(t, ctx, ns, "web-0", map[string]string{"app": "web", "v": "2"}) },
			[]string{"Pod/web-0 10.1.0.1 8080 ready=true serving=true"}, nil},
		{"not ready", func() { e.podStatus(t, ctx, ns, "web-0", "10.1.0.1", false) },
			[]string{"Pod/web-0 10.1.0.1 8080 ready=false serving=false"}, nil},
		{"deleted", func() {
			require.NoError(t, e.kube.CoreV1().Pods(ns).Delete(ctx, "web-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
		}, nil, []string{"Pod/web-0 10.1.0.1 8080 ready=false serving=false terminating"}},
	}
	var last *membershipv1.WatchServicesResponse
	for _, s := range steps {
		s.change()
		ev := expectUpsert(t, w, web, rev)
		if s.via != nil && slices.Equal(endpointsOf(ev.GetEndpoints()), s.via) {
			ev = expectUpsert(t, w, web, ev.GetRevision())
		}
		require.Equal(t, s.want, endpointsOf(ev.GetEndpoints()), s.name)
		require.Equal(t, start.GetEpoch(), ev.GetEpoch())
		rev, last = ev.GetRevision(), ev
	}
	// Nothing after the last step: testResume, from this position,
	// requires exactly the events of its own changes.
	require.Equal(t, clusterName, last.GetEndpoints().GetCluster())

	got, err := e.api.ListServicesForWorkload(ctx, &membershipv1.ListServicesForWorkloadRequest{Workload: "namespaces/" + ns + "/pods/other"})
	require.NoError(t, err)
	require.Empty(t, got.GetServices())
	_, err = e.api.ListServicesForWorkload(ctx, &membershipv1.ListServicesForWorkloadRequest{Workload: "namespaces/" + ns + "/pods/web-0"})
	require.Equal(t, "WORKLOAD_NOT_FOUND", apierr.Reason(err), "%v", err)
	return position{epoch: start.GetEpoch(), revision: rev}
}

func testResume(ctx context.Context, t *testing.T, e *env, from position) {
	require.NotZero(t, from.revision, "the lifecycle test must have run")
	const ns = "lifecycle"
	web, api := "namespaces/"+ns+"/services/web", "namespaces/"+ns+"/services/api"

	// Changes while no one watches: a new ready Pod for web, a new
	// Service api with a Pod of its own.
	e.pod(t, ctx, ns, "web-1", map[string]string{"app": "web"}, 8080)
	e.podStatus(t, ctx, ns, "web-1", "10.1.0.2", true)
	e.service(t, ctx, ns, "api", map[string]string{"app": "api"}, "http")
	e.pod(t, ctx, ns, "api-0", map[string]string{"app": "api"}, 9090)
	e.podStatus(t, ctx, ns, "api-0", "10.1.0.3", true)
	wantWeb := []string{"Pod/web-1 10.1.0.2 8080 ready=true serving=true"}
	wantAPI := []string{"Pod/api-0 10.1.0.3 9090 ready=true serving=true"}
	waitMembers(ctx, t, e, web, wantWeb)
	waitMembers(ctx, t, e, api, wantAPI)

	w := e.watch(t, &membershipv1.WatchServicesRequest{Namespace: ns, StartRevision: from.revision, Epoch: from.epoch})
	// Exactly what was missed: one event per changed Service, each with
	// its latest set, no snapshot and nothing already seen.
	got := map[string][]string{}
	rev := from.revision
	for range 2 {
		ev := w.next(t, evTimeout)
		require.Equal(t, upsertEv, ev.GetType(), "a resumed watch starts with no snapshot: %v", ev)
		require.Greater(t, ev.GetRevision(), rev)
		require.NotContains(t, got, ev.GetEndpoints().GetService(), "a service twice")
		got[ev.GetEndpoints().GetService()] = endpointsOf(ev.GetEndpoints())
		rev = ev.GetRevision()
	}
	require.Equal(t, map[string][]string{web: wantWeb, api: wantAPI}, got)
	// Nothing more was missed: the next event is that of the change below.

	// Live again.
	e.podStatus(t, ctx, ns, "web-1", "10.1.0.2", false)
	ev := expectUpsert(t, w, web, rev)
	require.Equal(t, []string{"Pod/web-1 10.1.0.2 8080 ready=false serving=false"}, endpointsOf(ev.GetEndpoints()))
	w.cancel()

	t.Run("stale epoch gets a snapshot", func(t *testing.T) {
		w := e.watch(t, &membershipv1.WatchServicesRequest{Namespace: ns, StartRevision: ev.GetRevision(), Epoch: "another-server"})
		require.Equal(t, snapStart, w.next(t, evTimeout).GetType())
		var services []string
		for {
			ev := w.next(t, evTimeout)
			if ev.GetType() == snapEnd {
				break
			}
			require.Equal(t, upsertEv, ev.GetType())
			services = append(services, ev.GetEndpoints().GetService())
		}
		require.Equal(t, []string{api, web}, services)
	})
}

func testExportedOnly(ctx context.Context, t *testing.T, e *env) {
	const ns = "lifecycle"
	web := "namespaces/" + ns + "/services/web"
	w := e.watch(t, &membershipv1.WatchServicesRequest{Namespace: ns, ExportedOnly: true})
	require.Equal(t, snapStart, w.next(t, evTimeout).GetType())
	end := w.next(t, evTimeout)
	require.Equal(t, snapEnd, end.GetType(), "nothing is exported yet")

	exports := e.mcs.MulticlusterV1beta1().ServiceExports(ns)
	_, err := exports.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	ev := expectUpsert(t, w, web, end.GetRevision())
	info := ev.GetEndpoints().GetExport()
	require.True(t, info.GetExported())
	require.NotNil(t, info.GetExportCreateTime())
	require.Equal(t, membershipv1.ServiceType_SERVICE_TYPE_CLUSTER_SET_IP, info.GetType())
	require.Equal(t, membershipv1.SessionAffinity_SESSION_AFFINITY_NONE, info.GetSessionAffinity())

	require.NoError(t, exports.Delete(ctx, "web", metav1.DeleteOptions{}))
	del := w.next(t, evTimeout)
	require.Equal(t, deleteEv, del.GetType(), "a service no longer exported leaves the exported-only view")
	require.Equal(t, web, del.GetEndpoints().GetService())
	require.Equal(t, clusterName, del.GetEndpoints().GetCluster())
	require.Greater(t, del.GetRevision(), ev.GetRevision())
}

// testBurst flips the readiness of a Service's 50 Pods at once: the
// consumer gets a handful of events, each the full latest set, not one per
// Pod.
func testBurst(ctx context.Context, t *testing.T, e *env) {
	const ns, pods = "burst", 50
	svc := "namespaces/" + ns + "/services/web"
	e.namespace(t, ctx, ns)
	e.service(t, ctx, ns, "web", map[string]string{"app": "web"}, "http")
	var before, want []string
	for i := range pods {
		name := fmt.Sprintf("web-%02d", i)
		e.pod(t, ctx, ns, name, map[string]string{"app": "web"}, 8080)
		e.podStatus(t, ctx, ns, name, fmt.Sprintf("10.2.0.%d", i+1), false)
		before = append(before, fmt.Sprintf("Pod/%s 10.2.0.%d 8080 ready=false serving=false", name, i+1))
		want = append(want, fmt.Sprintf("Pod/%s 10.2.0.%d 8080 ready=true serving=true", name, i+1))
	}
	slices.Sort(before)
	slices.Sort(want)
	waitMembers(ctx, t, e, svc, before)
	w := e.watch(t, &membershipv1.WatchServicesRequest{Namespace: ns})
	for w.next(t, evTimeout).GetType() != snapEnd {
	}

	parallel(t, pods, 8, func(i int) error {
		e.podStatus(t, ctx, ns, fmt.Sprintf("web-%02d", i), fmt.Sprintf("10.2.0.%d", i+1), true)
		return nil
	})
	events := 0
	for {
		ev := w.next(t, evTimeout)
		require.Equal(t, upsertEv, ev.GetType())
		events++
		if slices.Equal(endpointsOf(ev.GetEndpoints()), want) {
			break
		}
	}
	t.Logf("%d pod changes, %d events", pods, events)
	require.Less(t, events, pods/2, "a burst is coalesced")
	// Nothing trails the burst: the next event is that of one more change.
	e.podStatus(t, ctx, ns, "web-00", "10.2.0.1", false)
	ev := w.next(t, evTimeout)
	require.Equal(t, upsertEv, ev.GetType())
	require.Contains(t, endpointsOf(ev.GetEndpoints()), "Pod/web-00 10.2.0.1 8080 ready=false serving=false")
}

func register(ctx context.Context, e *env, w *membershipv1.Workload) (*membershipv1.RegisterWorkloadResponse, error) {
	return e.api.RegisterWorkload(ctx, &membershipv1.RegisterWorkloadRequest{Workload: w})
}

func testHeartbeatTTL(ctx context.Context, t *testing.T, e *env) {
	const ns = "heartbeat"
	vm := "namespaces/" + ns + "/services/vm"
	e.namespace(t, ctx, ns)
	e.service(t, ctx, ns, "vm", map[string]string{"role": "vm"}, "metrics")
	waitMembers(ctx, t, e, vm, nil)
	w := e.watch(t, &membershipv1.WatchServicesRequest{Namespace: ns})
	for w.next(t, evTimeout).GetType() != snapEnd {
	}

	const ttl = time.Second
	name := "namespaces/" + ns + "/workloads/vm-1"
	resp, err := register(ctx, e, &membershipv1.Workload{
		Name:      name,
		Labels:    map[string]string{"role": "vm"},
		Addresses: []string{"10.50.0.1"},
		Ports:     []*membershipv1.WorkloadPort{{Name: "metrics", Port: 9100}},
		Ready:     true,
		Ttl:       durationpb.New(ttl),
		Zone:      "zone-a",
	})
	require.NoError(t, err)
	require.True(t, resp.GetCreated())
	require.True(t, resp.GetWorkload().GetEffectiveReady())
	ready := []string{"ExternalWorkload/vm-1 10.50.0.1 9100 ready=true serving=true"}
	// The object exists a moment before its status says ready.
	ev := untilMembers(t, w, vm, ready)
	require.Equal(t, "zone-a", ev.GetEndpoints().GetGroups()[0].GetEndpoints()[0].GetZone())

	// Heartbeats every 300ms keep it ready for well past its TTL.
	var stopped time.Time
	for range 6 {
		time.Sleep(300 * time.Millisecond)
		hb, err := e.api.HeartbeatWorkload(ctx, &membershipv1.HeartbeatWorkloadRequest{Name: name})
		require.NoError(t, err)
		stopped = time.Now()
		require.Equal(t, ttl/3, hb.GetNextHeartbeat().AsDuration())
	}
	// No event while heartbeats came: the next one must be the expiry,
	// not before the TTL has passed.

	// Then they stop: not ready once the TTL has passed, not before.
	ev = expectUpsert(t, w, vm, ev.GetRevision())
	require.Equal(t, []string{"ExternalWorkload/vm-1 10.50.0.1 9100 ready=false serving=false"}, endpointsOf(ev.GetEndpoints()))
	took := time.Since(stopped)
	require.Greater(t, took, ttl-100*time.Millisecond, "expired %s after the last heartbeat", took)
	require.Less(t, took, ttl+2*time.Second, "expired %s after the last heartbeat", took)
	t.Logf("not ready %s after the last heartbeat (ttl %s)", took.Round(time.Millisecond), ttl)

	got, err := e.api.GetWorkload(ctx, &membershipv1.GetWorkloadRequest{Name: name})
	require.NoError(t, err)
	require.True(t, got.GetWorkload().GetReady(), "it still reports ready")
	require.False(t, got.GetWorkload().GetEffectiveReady())
	ew, err := workloadclient.ForNamespace(e.workloads, ns).Get(ctx, "vm-1", metav1.GetOptions{})
	require.NoError(t, err)
	cond := meta.FindStatusCondition(ew.Status.Conditions, workloadv1alpha1.ConditionReady)
	require.Equal(t, metav1.ConditionFalse, cond.Status)
	require.Equal(t, workloadv1alpha1.ReasonHeartbeatExpired, cond.Reason)

	// A heartbeat brings it back as it last reported: ready.
	_, err = e.api.HeartbeatWorkload(ctx, &membershipv1.HeartbeatWorkloadRequest{Name: name})
	require.NoError(t, err)
	ev = expectUpsert(t, w, vm, ev.GetRevision())
	require.Equal(t, ready, endpointsOf(ev.GetEndpoints()))
	// And one saying not ready is believed.
	_, err = e.api.HeartbeatWorkload(ctx, &membershipv1.HeartbeatWorkloadRequest{Name: name, Ready: proto.Bool(false)})
	require.NoError(t, err)
	ev = expectUpsert(t, w, vm, ev.GetRevision())
	require.Equal(t, []string{"ExternalWorkload/vm-1 10.50.0.1 9100 ready=false serving=false"}, endpointsOf(ev.GetEndpoints()))

	_, err = e.api.HeartbeatWorkload(ctx, &membershipv1.HeartbeatWorkloadRequest{Name: "namespaces/" + ns + "/workloads/nobody"})
	require.Equal(t, codes.NotFound, status.Code(err))
	require.Equal(t, "WORKLOAD_NOT_FOUND", apierr.Reason(err))
}

func createPool(ctx context.Context, t *testing.T, e *env, id, cidr string) {
	t.Helper()
	_, err := e.alloc.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: id, Pool: &allocatorv1.Pool{Cidrs: []string{cidr}}})
	require.NoError(t, err)
}

func allocationsOf(ctx context.Context, t *testing.T, e *env, ns, name string) []*allocatorv1.Allocation {
	t.Helper()
	resp, err := e.alloc.ListAllocations(ctx, &allocatorv1.ListAllocationsRequest{
		Pool: "pools/-", OwnerKind: workloadv1alpha1.KindExternalWorkload, OwnerNamespace: ns, OwnerName: name,
	})
	require.NoError(t, err)
	return resp.GetAllocations()
}

func testAllocation(ctx context.Context, t *testing.T, e *env) {
	const ns = "alloc"
	e.namespace(t, ctx, ns)
	createPool(ctx, t, e, "ext", "10.200.0.0/28")
	name := "namespaces/" + ns + "/workloads/vm-2"
	w := &membershipv1.Workload{Name: name, Labels: map[string]string{"role": "vm"}, AddressPool: "pools/ext", Ready: true}
	first, err := register(ctx, e, w)
	require.NoError(t, err)
	require.True(t, first.GetCreated())
	addr := first.GetWorkload().GetAddresses()
	require.Len(t, addr, 1)
	require.Equal(t, "pools/ext/allocations/"+addr[0], first.GetWorkload().GetAllocation())

	allocs := allocationsOf(ctx, t, e, ns, "vm-2")
	require.Len(t, allocs, 1)
	owner := allocs[0].GetOwner()
	require.Equal(t, clusterName, owner.GetCluster())
	require.Equal(t, first.GetWorkload().GetUid(), owner.GetUid())
	require.Equal(t, addr[0], allocs[0].GetAddress())

	again, err := register(ctx, e, w)
	require.NoError(t, err)
	require.False(t, again.GetCreated())
	require.Equal(t, addr, again.GetWorkload().GetAddresses(), "registering again keeps the address")
	require.Len(t, allocationsOf(ctx, t, e, ns, "vm-2"), 1)

	_, err = e.api.DeregisterWorkload(ctx, &membershipv1.DeregisterWorkloadRequest{Name: name, Etag: "1"})
	require.Equal(t, "ETAG_MISMATCH", apierr.Reason(err), "%v", err)

	resp, err := e.api.DeregisterWorkload(ctx, &membershipv1.DeregisterWorkloadRequest{Name: name})
	require.NoError(t, err)
	require.Equal(t, first.GetWorkload().GetAllocation(), resp.GetReleasedAllocation())
	require.Empty(t, allocationsOf(ctx, t, e, ns, "vm-2"), "deregistration released the address")
	_, err = workloadclient.ForNamespace(e.workloads, ns).Get(ctx, "vm-2", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "%v", err)

	_, err = e.api.DeregisterWorkload(ctx, &membershipv1.DeregisterWorkloadRequest{Name: name})
	require.Equal(t, "WORKLOAD_NOT_FOUND", apierr.Reason(err))
	_, err = e.api.DeregisterWorkload(ctx, &membershipv1.DeregisterWorkloadRequest{Name: name, AllowMissing: true})
	require.NoError(t, err)

	t.Run("an address left by an earlier object of the name is reclaimed", func(t *testing.T) {
		old, err := register(ctx, e, w)
		require.NoError(t, err)
		// The object goes without its address being released, as when a
		// deregistration is cut short.
		require.NoError(t, workloadclient.ForNamespace(e.workloads, ns).Delete(ctx, "vm-2", metav1.DeleteOptions{}))
		fresh, err := register(ctx, e, w)
		require.NoError(t, err)
		require.True(t, fresh.GetCreated())
		require.NotEqual(t, old.GetWorkload().GetUid(), fresh.GetWorkload().GetUid())
		allocs := allocationsOf(ctx, t, e, ns, "vm-2")
		require.Len(t, allocs, 1)
		require.Equal(t, fresh.GetWorkload().GetUid(), allocs[0].GetOwner().GetUid(), "the new object owns the address")
		require.Equal(t, []string{allocs[0].GetAddress()}, fresh.GetWorkload().GetAddresses())
	})

	t.Run("moving to addresses of its own releases the pool's", func(t *testing.T) {
		own := proto.Clone(w).(*membershipv1.Workload)
		own.AddressPool, own.Addresses = "", []string{"192.0.2.50"}
		resp, err := register(ctx, e, own)
		require.NoError(t, err)
		require.False(t, resp.GetCreated())
		require.Equal(t, []string{"192.0.2.50"}, resp.GetWorkload().GetAddresses())
		require.Empty(t, resp.GetWorkload().GetAllocation())
		require.Empty(t, allocationsOf(ctx, t, e, ns, "vm-2"))
		del, err := e.api.DeregisterWorkload(ctx, &membershipv1.DeregisterWorkloadRequest{Name: name, Etag: resp.GetWorkload().GetEtag()})
		require.NoError(t, err)
		require.Empty(t, del.GetReleasedAllocation())
	})
}

func testConcurrentRegistrations(ctx context.Context, t *testing.T, e *env) {
	const ns = "race"
	e.namespace(t, ctx, ns)
	createPool(ctx, t, e, "race", "10.201.0.0/24")
	w := &membershipv1.Workload{
		Name:        "namespaces/" + ns + "/workloads/vm-c",
		Labels:      map[string]string{"role": "vm"},
		AddressPool: "pools/race",
		Ports:       []*membershipv1.WorkloadPort{{Name: "http", Port: 80}},
		Ready:       true,
	}
	const n = 16
	resps := make([]*membershipv1.RegisterWorkloadResponse, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { resps[i], errs[i] = register(ctx, e, w) })
	}
	wg.Wait()
	created := 0
	for i := range n {
		require.NoError(t, errs[i])
		if resps[i].GetCreated() {
			created++
		}
		require.Equal(t, resps[0].GetWorkload().GetUid(), resps[i].GetWorkload().GetUid())
		require.Equal(t, resps[0].GetWorkload().GetAddresses(), resps[i].GetWorkload().GetAddresses())
	}
	require.Equal(t, 1, created, "exactly one registration created the object")
	list, err := workloadclient.ForNamespace(e.workloads, ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 1, "one object")
	allocs := allocationsOf(ctx, t, e, ns, "vm-c")
	require.Len(t, allocs, 1, "one allocation")
	require.Equal(t, resps[0].GetWorkload().GetAddresses(), []string{allocs[0].GetAddress()})
	require.Equal(t, []string{allocs[0].GetAddress()}, list.Items[0].Spec.WorkloadIPs)
	require.True(t, meta.IsStatusConditionTrue(list.Items[0].Status.Conditions, workloadv1alpha1.ConditionReady))
}

func testBadInput(ctx context.Context, t *testing.T, e *env) {
	const ns = "bad"
	e.namespace(t, ctx, ns)
	name := "namespaces/" + ns + "/workloads/vm"
	valid := func() *membershipv1.Workload {
		return &membershipv1.Workload{
			Name: name, Labels: map[string]string{"app": "db"}, Addresses: []string{"10.60.0.1"},
			Ports: []*membershipv1.WorkloadPort{{Name: "sql", Port: 5432}},
		}
	}
	tests := []struct {
		name   string
		change func(w *membershipv1.Workload)
		reason string
		field  string
	}{
		{"label key", func(w *membershipv1.Workload) { w.Labels["bad key!"] = "x" }, "INVALID_ARGUMENT", "workload.labels[bad key!]"},
		{"label key prefix", func(w *membershipv1.Workload) { w.Labels["Not_A.domain/x"] = "x" }, "INVALID_ARGUMENT", "workload.labels[Not_A.domain/x]"},
		{"label value", func(w *membershipv1.Workload) { w.Labels["app"] = strings.Repeat("v", 64) }, "INVALID_ARGUMENT", "workload.labels[app]"},
		{"leading zeros", func(w *membershipv1.Workload) { w.Addresses = []string{"010.60.0.1"} }, "INVALID_ARGUMENT", "workload.addresses[0]"},
		{"a CIDR", func(w *membershipv1.Workload) { w.Addresses = []string{"10.60.0.0/24"} }, "INVALID_ARGUMENT", "workload.addresses[0]"},
		{"a zone", func(w *membershipv1.Workload) { w.Addresses = []string{"fe80::1%eth0"} }, "INVALID_ARGUMENT", "workload.addresses[0]"},
		{"loopback", func(w *membershipv1.Workload) { w.Addresses = []string{"127.0.0.1"} }, "INVALID_ARGUMENT", "workload.addresses[0]"},
		{"two of a family", func(w *membershipv1.Workload) { w.Addresses = []string{"10.60.0.1", "10.60.0.2"} }, "INVALID_ARGUMENT", "workload.addresses[1]"},
		{"no address", func(w *membershipv1.Workload) { w.Addresses = nil }, "INVALID_ARGUMENT", "workload.addresses"},
		{"port zero", func(w *membershipv1.Workload) { w.Ports[0].Port = 0 }, "INVALID_ARGUMENT", "workload.ports[0].port"},
		{"port too big", func(w *membershipv1.Workload) { w.Ports[0].Port = 70000 }, "INVALID_ARGUMENT", "workload.ports[0].port"},
		{"port name", func(w *membershipv1.Workload) { w.Ports[0].Name = "SQL_PORT" }, "INVALID_ARGUMENT", "workload.ports[0].name"},
		{"duplicate port name", func(w *membershipv1.Workload) {
			w.Ports = append(w.Ports, &membershipv1.WorkloadPort{Name: "sql", Port: 5433})
		}, "INVALID_ARGUMENT", "workload.ports[1].name"},
		{"ttl", func(w *membershipv1.Workload) { w.Ttl = durationpb.New(500 * time.Millisecond) }, "INVALID_ARGUMENT", "workload.ttl"},
		{"name", func(w *membershipv1.Workload) { w.Name = "workloads/vm" }, "INVALID_ARGUMENT", "workload.name"},
		{"namespace", func(w *membershipv1.Workload) { w.Name = "namespaces/Bad_NS/workloads/vm" }, "INVALID_ARGUMENT", "workload.name"},
		{"pool name", func(w *membershipv1.Workload) { w.Addresses, w.AddressPool = nil, "ext" }, "INVALID_ARGUMENT", "workload.address_pool"},
		{"unknown pool", func(w *membershipv1.Workload) { w.Addresses, w.AddressPool = nil, "pools/nope" }, "POOL_NOT_FOUND", "workload.address_pool"},
		{"pool and addresses", func(w *membershipv1.Workload) { w.AddressPool = "pools/ext" }, "INVALID_ARGUMENT", "workload.address_pool"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := valid()
			tc.change(w)
			_, err := register(ctx, e, w)
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			require.Equal(t, tc.reason, apierr.Reason(err))
			var fields []string
			for _, v := range apierr.FieldViolations(err) {
				fields = append(fields, v.Field)
				require.NotEmpty(t, v.Description)
			}
			require.Contains(t, fields, tc.field)
		})
	}
	// Nothing was written: no object, no allocation.
	list, err := workloadclient.ForNamespace(e.workloads, ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, list.Items)
	require.Empty(t, allocationsOf(ctx, t, e, ns, "vm"))

	// The valid one goes through, so the cases above failed for their
	// own reason.
	_, err = register(ctx, e, valid())
	require.NoError(t, err)
}

func testListWorkloads(ctx context.Context, t *testing.T, e *env) {
	const ns = "listing"
	e.namespace(t, ctx, ns)
	for i := range 5 {
		tier := "a"
		if i%2 == 1 {
			tier = "b"
		}
		_, err := register(ctx, e, &membershipv1.Workload{
			Name: fmt.Sprintf("namespaces/%s/workloads/vm-%d", ns, i), Labels: map[string]string{"tier": tier},
			Addresses: []string{fmt.Sprintf("10.70.0.%d", i+1)},
		})
		require.NoError(t, err)
	}
	var names []string
	token := ""
	for page := 0; ; page++ {
		require.Less(t, page, 10)
		resp, err := e.api.ListWorkloads(ctx, &membershipv1.ListWorkloadsRequest{Namespace: ns, PageSize: 2, PageToken: token})
		require.NoError(t, err)
		require.LessOrEqual(t, len(resp.GetWorkloads()), 2)
		for _, w := range resp.GetWorkloads() {
			names = append(names, w.GetName())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		_, err = e.api.ListWorkloads(ctx, &membershipv1.ListWorkloadsRequest{Namespace: "other", PageSize: 2, PageToken: token})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "a token is bound to its query")
	}
	require.Len(t, names, 5)
	resp, err := e.api.ListWorkloads(ctx, &membershipv1.ListWorkloadsRequest{Namespace: ns, LabelSelector: "tier=b"})
	require.NoError(t, err)
	require.Len(t, resp.GetWorkloads(), 2)
	_, err = e.api.ListWorkloads(ctx, &membershipv1.ListWorkloadsRequest{LabelSelector: "tier in (a"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
}

// plexusctl runs the CLI against membership and returns what it printed.
func plexusctl(ctx context.Context, t *testing.T, e *env, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := cmd.NewRoot(&out)
	root.SetArgs(append([]string{"--membership-addr", e.addr}, args...))
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

func testPlexusctl(ctx context.Context, t *testing.T, e *env) {
	const ns = "cli"
	e.namespace(t, ctx, ns)
	e.service(t, ctx, ns, "db", map[string]string{"app": "db"}, "sql")
	waitMembers(ctx, t, e, "namespaces/"+ns+"/services/db", nil)

	out, err := plexusctl(ctx, t, e, "workload", "register", "vm-1", "-n", ns, "--label", "app=db",
		"--address", "192.0.2.10", "--port", "sql:5432", "--port", "dns:53/udp", "--ttl", "30s", "--zone", "z1")
	require.NoError(t, err)
	require.Regexp(t, `cli/vm-1\s+192.0.2.10\s+sql:5432,dns:53/udp\s+true\s+true`, out)

	out, err = plexusctl(ctx, t, e, "workload", "get", ns+"/vm-1", "-o", "json")
	require.NoError(t, err)
	var got membershipv1.GetWorkloadResponse
	require.NoError(t, protojson.Unmarshal([]byte(out), &got), out)
	require.Equal(t, "namespaces/cli/workloads/vm-1", got.GetWorkload().GetName())
	require.Equal(t, "z1", got.GetWorkload().GetZone())

	out, err = plexusctl(ctx, t, e, "workload", "heartbeat", "vm-1", "-n", ns, "--ready=false")
	require.NoError(t, err)
	require.Regexp(t, `cli/vm-1\s+192.0.2.10\s+\S+\s+false\s+false`, out)
	_, err = plexusctl(ctx, t, e, "workload", "heartbeat", "vm-1", "-n", ns, "--ready")
	require.NoError(t, err)

	waitMembers(ctx, t, e, "namespaces/"+ns+"/services/db", []string{"ExternalWorkload/vm-1 192.0.2.10 5432 ready=true serving=true"})
	out, err = plexusctl(ctx, t, e, "members", "get", "db", "-n", ns)
	require.NoError(t, err)
	require.Regexp(t, `192.0.2.10\s+5432\s+true\s+true\s+false\s+ExternalWorkload/vm-1\s+-\s+z1`, out)

	out, err = plexusctl(ctx, t, e, "workload", "list", "-A", "-l", "app=db", "-o", "yaml")
	require.NoError(t, err)
	require.Contains(t, out, "name: namespaces/cli/workloads/vm-1")

	// The watch runs until interrupted; its output is read while it runs.
	wctx, cancel := context.WithCancel(ctx)
	live := &servertest.Buffer{}
	root := cmd.NewRoot(live)
	root.SetArgs([]string{"--membership-addr", e.addr, "members", "watch", "-n", ns})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(wctx) }()
	upsert := regexp.MustCompile(`UPSERT\s+\d+\s+cli/db\s+192.0.2.10\s+5432\s+true`)
	require.Eventually(t, func() bool { return upsert.MatchString(live.String()) }, evTimeout, 20*time.Millisecond, "%s", live)
	require.Contains(t, live.String(), "SNAPSHOT_START")
	cancel()
	require.NoError(t, <-done, "an interrupted watch exits cleanly")

	out, err = plexusctl(ctx, t, e, "workload", "deregister", "vm-1", "-n", ns)
	require.NoError(t, err)
	require.Contains(t, out, "cli/vm-1")
	_, err = plexusctl(ctx, t, e, "workload", "get", "vm-1", "-n", ns)
	require.Equal(t, "WORKLOAD_NOT_FOUND", apierr.Reason(err))
	_, err = plexusctl(ctx, t, e, "workload", "register", "vm-2", "-n", ns, "--address", "192.0.2.11", "--port", "sql:port")
	require.ErrorContains(t, err, "NAME:PORT")
}
