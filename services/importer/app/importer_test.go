package app_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// webEndpoints is shop/web with n endpoints on http=8080; endpoint 1 is
// terminating (serving, not ready) with a hostname and a zone hint, so the
// conditions and topology can be followed into the slices.
func webEndpoints(n int) *membershipv1.ServiceEndpoints {
	eps := sourcetest.Endpoints("shop", "web", []string{"http=8080"})
	g := eps.Groups[0]
	for i := range n {
		ep := &membershipv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.1.%d.%d", i/256, i%256)},
			Conditions: &membershipv1.EndpointConditions{Ready: true, Serving: true},
			Zone:       "zone-a",
			NodeName:   fmt.Sprintf("node-%d", i%5),
			TargetRef:  &membershipv1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: fmt.Sprintf("web-%d", i), Uid: fmt.Sprintf("uid-%d", i)},
		}
		if i == 1 {
			ep.Conditions = &membershipv1.EndpointConditions{Ready: false, Serving: true, Terminating: true}
			ep.Hostname = "web-1"
			ep.Hints = &membershipv1.EndpointHints{ForZones: []string{"zone-b"}}
		}
		g.Endpoints = append(g.Endpoints, ep)
	}
	return eps
}

func findEndpoint(ss []discovery.EndpointSlice, addr string) (*discovery.EndpointSlice, *discovery.Endpoint) {
	for i := range ss {
		for j := range ss[i].Endpoints {
			if ss[i].Endpoints[j].Addresses[0] == addr {
				return &ss[i], &ss[i].Endpoints[j]
			}
		}
	}
	return nil, nil
}

func TestExportImportChangeWithdraw(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "vips", "10.96.100.0/24") // inside the cluster's service range
	e.namespace(t, "shop")
	east := sourcetest.Start(t, "east")
	east.Set(webEndpoints(250))
	im := e.startImporter(t, e.options("vips"), east)

	// The VIP is the allocator's, owned by the clusterset service.
	var vip string
	require.Eventually(t, func() bool {
		resp, err := e.alloc.ListAllocations(context.Background(), &allocatorv1.ListAllocationsRequest{Pool: "pools/vips",
			OwnerKind: mcsnames.OwnerKindClusterSetService, OwnerNamespace: "shop", OwnerName: "web"})
		if err != nil || len(resp.GetAllocations()) != 1 {
			return false
		}
		require.Empty(t, resp.GetAllocations()[0].GetOwner().GetCluster())
		vip = resp.GetAllocations()[0].GetAddress()
		return true
	}, waitFor, tick)

	var si *mcsv1beta1.ServiceImport
	require.Eventually(t, func() bool {
		var err error
		si, err = e.serviceImport("shop", "web")
		return err == nil && condition(si, "Ready") != nil && condition(si, "Ready").Status == metav1.ConditionTrue
	}, waitFor, tick)
	require.Equal(t, []string{vip}, si.Spec.IPs)
	require.Equal(t, mcsv1beta1.ClusterSetIP, si.Spec.Type)
	require.Equal(t, []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}}, si.Spec.Ports)
	require.Equal(t, []mcsv1beta1.ClusterStatus{{Cluster: "east"}}, si.Status.Clusters)
	require.Equal(t, mcsv1beta1.EndpointSliceObjectsPresent, si.Status.EndpointSliceObjects)
	require.Equal(t, metav1.ConditionFalse, condition(si, "Conflict").Status)
	require.Equal(t, metav1.ConditionTrue, condition(si, "VIPAllocated").Status)
	require.Equal(t, mcsnames.ManagedBy, si.Labels["app.kubernetes.io/managed-by"])

	svc, err := e.derived("shop", "web")
	require.NoError(t, err)
	require.Empty(t, svc.Spec.Selector)
	require.Equal(t, vip, svc.Spec.ClusterIP, "kube-proxy programs the clusterset VIP")
	require.Equal(t, "web", svc.Labels[mcsnames.LabelDerivedFrom])
	require.Len(t, svc.Spec.Ports, 1)
	require.Equal(t, int32(8080), svc.Spec.Ports[0].Port)
	require.Len(t, svc.OwnerReferences, 1)
	require.Equal(t, si.UID, svc.OwnerReferences[0].UID)

	var ss []discovery.EndpointSlice
	require.Eventually(t, func() bool {
		ss = e.slicesOf(t, "shop", "web")
		return endpointsIn(ss)["east"] == 250
	}, waitFor, tick)
	require.Len(t, ss, 3, "250 endpoints at 100 per slice")
	for _, s := range ss {
		require.Equal(t, map[string]string{
			"kubernetes.io/service-name":                mcsnames.DerivedServiceName("web"),
			"multicluster.kubernetes.io/service-name":   "web",
			"multicluster.kubernetes.io/source-cluster": "east",
			"endpointslice.kubernetes.io/managed-by":    "importer.plexus.dev",
		}, s.Labels)
		require.Len(t, s.OwnerReferences, 1)
		require.Equal(t, svc.UID, s.OwnerReferences[0].UID)
		require.Equal(t, discovery.AddressTypeIPv4, s.AddressType)
	}
	_, ep := findEndpoint(ss, "10.1.0.1")
	require.NotNil(t, ep)
	require.False(t, *ep.Conditions.Ready)
	require.True(t, *ep.Conditions.Serving)
	require.True(t, *ep.Conditions.Terminating)
	require.Equal(t, "web-1", *ep.Hostname)
	require.Equal(t, "node-1", *ep.NodeName)
	require.Equal(t, "zone-a", *ep.Zone)
	require.Equal(t, []discovery.ForZone{{Name: "zone-b"}}, ep.Hints.ForZones)
	require.Equal(t, &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web-1", UID: types.UID("uid-1")}, ep.TargetRef)

	got := im.get(t, "shop", "web")
	require.Equal(t, []string{vip}, got.GetIps())
	require.EqualValues(t, 3, got.GetEndpointSlices())
	require.Len(t, got.GetClusters(), 1)
	require.Equal(t, "east", got.GetClusters()[0].GetCluster())
	require.EqualValues(t, 250, got.GetClusters()[0].GetEndpoints())
	require.EqualValues(t, 249, got.GetClusters()[0].GetReadyEndpoints())
	require.Equal(t, "watch", got.GetClusters()[0].GetOrigin())
	require.False(t, got.GetClusters()[0].GetStale())
	require.NotNil(t, got.GetReconcileTime())

	// One endpoint changes: exactly one slice is written, nothing else.
	idle(t, im) // the informers saw the last status write, and nothing follows from it
	before := writes(t, im.registry)
	latencies := counter(t, im.registry, "plexus_importer_export_import_duration_seconds", nil)
	list, err := e.kube.DiscoveryV1().EndpointSlices("shop").List(ctxFor(t), metav1.ListOptions{})
	require.NoError(t, err)
	w, err := e.kube.DiscoveryV1().EndpointSlices("shop").Watch(ctxFor(t), metav1.ListOptions{
		LabelSelector: mcsnames.LabelMCSServiceName + "=web", ResourceVersion: list.ResourceVersion})
	require.NoError(t, err)
	defer w.Stop()
	traceID, parentSpan := "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	changed := webEndpoints(250)
	changed.Groups[0].Endpoints[7].Conditions.Ready = false
	east.Set(changed, sourcetest.WithTrace(map[string]string{"traceparent": "00-" + traceID + "-" + parentSpan + "-01"}))
	require.Eventually(t, func() bool {
		_, ep := findEndpoint(e.slicesOf(t, "shop", "web"), "10.1.0.7")
		return ep != nil && !*ep.Conditions.Ready
	}, waitFor, tick)
	idle(t, im) // whatever the change leads to has been done
	after := writes(t, im.registry)
	delta := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			delta[k] = d
		}
	}
	require.Equal(t, map[string]float64{"EndpointSlice update": 1}, delta)
	// The API server agrees: the same slices, one of them changed, and
	// that change is the first and only event of the watch up to it.
	now, err := e.kube.DiscoveryV1().EndpointSlices("shop").List(ctxFor(t), metav1.ListOptions{})
	require.NoError(t, err)
	versions := func(l *discovery.EndpointSliceList) map[string]string {
		out := map[string]string{}
		for _, s := range l.Items {
			out[s.Name] = s.ResourceVersion
		}
		return out
	}
	was, is := versions(list), versions(now)
	require.Equal(t, slices.Sorted(maps.Keys(was)), slices.Sorted(maps.Keys(is)), "no slice created or deleted")
	var changedSlice string
	for name, rv := range is {
		if rv != was[name] {
			require.Empty(t, changedSlice, "more than one slice changed")
			changedSlice = name
		}
	}
	require.NotEmpty(t, changedSlice)
	select {
	case ev := <-w.ResultChan():
		require.Equal(t, watch.Modified, ev.Type)
		s, ok := ev.Object.(*discovery.EndpointSlice)
		require.True(t, ok, "%T", ev.Object)
		require.Equal(t, changedSlice, s.Name)
		require.Equal(t, is[changedSlice], s.ResourceVersion)
	case <-time.After(waitFor):
		require.FailNow(t, "the watch did not see the slice change")
	}
	require.Equal(t, latencies+1, counter(t, im.registry, "plexus_importer_export_import_duration_seconds", nil), "the change's latency is observed once")

	// The reconcile span links to the change's trace and the slice write
	// is its child.
	var reconcile sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, s := range spans.Ended() {
			if s.Name() != "importer.reconcile" {
				continue
			}
			for _, l := range s.Links() {
				if l.SpanContext.TraceID().String() == traceID {
					reconcile = s
					return true
				}
			}
		}
		return false
	}, waitFor, tick)
	var latency bool
	for _, a := range reconcile.Attributes() {
		if a.Key == attribute.Key("plexus.export_import_latency_ms") {
			latency = a.Value.AsFloat64() > 0
		}
	}
	require.True(t, latency, "the reconcile span carries the export-to-import latency")
	var child bool
	for _, s := range spans.Ended() {
		if s.Parent().SpanID() == reconcile.SpanContext().SpanID() && strings.HasPrefix(s.Name(), "kube PUT endpointslices") {
			child = true
		}
	}
	require.True(t, child, "the slice write is a child span of the reconcile")

	// Withdrawal removes everything; the VIP stays (repair releases it).
	east.Delete("namespaces/shop/services/web")
	e.gone(t, "shop", "web")
	resp, err := e.alloc.ListAllocations(ctxFor(t), &allocatorv1.ListAllocationsRequest{Pool: "pools/vips", OwnerName: "web"})
	require.NoError(t, err)
	require.Len(t, resp.GetAllocations(), 1)
	_, err = im.api.GetServiceImport(ctxFor(t), &importerv1.GetServiceImportRequest{Name: importName("shop", "web")})
	require.Error(t, err)
}

func TestTwoClustersPortConflictOldestWins(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "vips", "10.96.100.0/24")
	e.namespace(t, "shop")
	east, west := sourcetest.Start(t, "east"), sourcetest.Start(t, "west")
	eastEps := sourcetest.Endpoints("shop", "cart", []string{"http=80", "metrics=9090"}, "10.1.0.1", "10.1.0.2")
	eastEps.Export.ExportCreateTime = timestamppb.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	westEps := sourcetest.Endpoints("shop", "cart", []string{"http=80", "admin=9091"}, "10.2.0.1")
	westEps.Ports[0].Protocol = membershipv1.Protocol_PROTOCOL_UDP // same name, other protocol: a conflict
	westEps.Export.ExportCreateTime = timestamppb.New(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC))
	east.Set(eastEps)
	west.Set(westEps)
	im := e.startImporter(t, e.options("vips"), east, west)

	var si *mcsv1beta1.ServiceImport
	require.Eventually(t, func() bool {
		var err error
		si, err = e.serviceImport("shop", "cart")
		return err == nil && len(si.Status.Clusters) == 2 && condition(si, "Conflict") != nil
	}, waitFor, tick)
	require.ElementsMatch(t, []mcsv1beta1.ServicePort{
		{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
		{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9090},
		{Name: "admin", Protocol: corev1.ProtocolTCP, Port: 9091},
	}, si.Spec.Ports, "the union, with the oldest export's http")
	c := condition(si, "Conflict")
	require.Equal(t, metav1.ConditionTrue, c.Status)
	require.Equal(t, "PortConflict", c.Reason)
	require.Contains(t, c.Message, "east")

	svc, err := e.derived("shop", "cart")
	require.NoError(t, err)
	require.Len(t, svc.Spec.Ports, 3)

	require.Eventually(t, func() bool {
		return fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "cart"))) == "map[east:2 west:1]"
	}, waitFor, tick, "one slice set per source cluster")

	got := im.get(t, "shop", "cart")
	var conflict *importerv1.Condition
	for _, c := range got.GetConditions() {
		if c.GetType() == "Conflict" {
			conflict = c
		}
	}
	require.NotNil(t, conflict)
	require.Equal(t, importerv1.ConditionStatus_CONDITION_STATUS_TRUE, conflict.GetStatus())
	require.Equal(t, []string{"east", "west"}, conflict.GetClusters(), "the winner first")

	events, err := e.kube.CoreV1().Events("shop").List(ctxFor(t), metav1.ListOptions{})
	require.NoError(t, err)
	var warned bool
	for _, ev := range events.Items {
		warned = warned || (ev.Reason == "ExportConflict" && ev.InvolvedObject.Name == "cart")
	}
	require.True(t, warned, "the conflict is an Event on the ServiceImport")
}

func TestSliceOfAnotherControllerIsNeverTouched(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "vips", "10.96.100.0/24")
	e.namespace(t, "shop")
	ready := true
	foreign, err := e.kube.DiscoveryV1().EndpointSlices("shop").Create(ctxFor(t), &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "not-ours", Labels: map[string]string{
			"kubernetes.io/service-name":                mcsnames.DerivedServiceName("web"),
			"multicluster.kubernetes.io/service-name":   "web",
			"multicluster.kubernetes.io/source-cluster": "east",
			"endpointslice.kubernetes.io/managed-by":    "endpointslice-controller.k8s.io",
		}},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints:   []discovery.Endpoint{{Addresses: []string{"10.9.9.9"}, Conditions: discovery.EndpointConditions{Ready: &ready}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	untouched := func() {
		t.Helper()
		s, err := e.kube.DiscoveryV1().EndpointSlices("shop").Get(ctxFor(t), "not-ours", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, foreign.ResourceVersion, s.ResourceVersion)
	}

	east := sourcetest.Start(t, "east")
	east.Set(webEndpoints(5))
	e.startImporter(t, e.options("vips"), east)
	require.Eventually(t, func() bool {
		ss := e.slicesOf(t, "shop", "web")
		return len(ss) == 2 && endpointsIn(ss)["east"] == 6
	}, waitFor, tick, "the importer's slice beside the foreign one")
	untouched()

	east.Set(webEndpoints(3))
	require.Eventually(t, func() bool { return endpointsIn(e.slicesOf(t, "shop", "web"))["east"] == 4 }, waitFor, tick)
	untouched()

	east.Delete("namespaces/shop/services/web")
	require.Eventually(t, func() bool {
		_, err := e.serviceImport("shop", "web")
		return apierrors.IsNotFound(err) && len(e.slicesOf(t, "shop", "web")) == 1
	}, waitFor, tick)
	untouched()
}

func TestOrphansRemovedAfterRestart(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "vips", "10.96.100.0/24")
	e.namespace(t, "shop")
	east, west := sourcetest.Start(t, "east"), sourcetest.Start(t, "west")
	east.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, "10.1.0.1", "10.1.0.2"))
	east.Set(sourcetest.Endpoints("shop", "api", []string{"http=80"}, "10.1.0.3"))
	west.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, "10.2.0.1"))
	west.Set(sourcetest.Endpoints("shop", "db", []string{"sql=5432"}, "10.2.0.9"))
	o := e.options("vips")
	const grace = 6 * time.Second
	o.SourceGrace = grace
	im := e.startImporter(t, o, east, west)
	require.Eventually(t, func() bool {
		return fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "web"))) == "map[east:2 west:1]" &&
			len(e.slicesOf(t, "shop", "api")) == 1 && len(e.slicesOf(t, "shop", "db")) == 1
	}, waitFor, tick)

	// While the importer is down, east withdraws web and west becomes
	// unreachable.
	im.stop()
	east.Delete("namespaces/shop/services/web")
	west.Stop()
	started := time.Now()
	e.startImporter(t, o, east, west)

	// East's snapshot is its last word: its web slice goes at once. West
	// was never heard from: its slices stay for the grace.
	require.Eventually(t, func() bool {
		return fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "web"))) == "map[west:1]"
	}, waitFor, tick)
	require.Less(t, time.Since(started), grace, "east's orphan went before the grace")
	require.Len(t, e.slicesOf(t, "shop", "db"), 1)
	_, err := e.serviceImport("shop", "web")
	require.NoError(t, err, "the import stays while an unknown cluster's slices do")
	require.Len(t, e.slicesOf(t, "shop", "api"), 1, "what a source still exports stays")

	// After the grace, west's slices count as orphaned: web and db go.
	e.gone(t, "shop", "web")
	e.gone(t, "shop", "db")
	require.GreaterOrEqual(t, time.Since(started), grace)
	require.Len(t, e.slicesOf(t, "shop", "api"), 1)
}

func TestDualStackTogetherOrNeither(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "vips4", "10.96.100.0/24")
	e.pool(t, "vips6", "fd00:10::/126")
	// Fill the IPv6 pool.
	var fillers []*allocatorv1.Allocation
	for i := 0; ; i++ {
		resp, err := e.alloc.Allocate(ctxFor(t), &allocatorv1.AllocateRequest{Pool: "pools/vips6",
			Owner: &allocatorv1.Owner{Kind: "Filler", Name: fmt.Sprint("f", i)}})
		if err != nil {
			require.Equal(t, "POOL_EXHAUSTED", apierr.Reason(err), "%v", err)
			break
		}
		fillers = append(fillers, resp.GetAllocation())
		require.Less(t, i, 10)
	}
	require.NotEmpty(t, fillers)
	e.namespace(t, "shop")
	east := sourcetest.Start(t, "east")
	east.Set(sourcetest.Endpoints("shop", "dual", []string{"http=80"}, "10.1.0.1"))
	im := e.startImporter(t, e.options("vips4", "vips6"), east)

	require.Eventually(t, func() bool {
		si, err := e.serviceImport("shop", "dual")
		return err == nil && condition(si, "VIPAllocated") != nil && condition(si, "VIPAllocated").Status == metav1.ConditionFalse
	}, waitFor, tick)
	si, err := e.serviceImport("shop", "dual")
	require.NoError(t, err)
	require.Empty(t, si.Spec.IPs)
	require.Equal(t, metav1.ConditionFalse, condition(si, "Ready").Status)
	for _, pool := range []string{"pools/vips4", "pools/vips6"} {
		resp, err := e.alloc.ListAllocations(ctxFor(t), &allocatorv1.ListAllocationsRequest{Pool: pool,
			OwnerKind: mcsnames.OwnerKindClusterSetService, OwnerName: "dual"})
		require.NoError(t, err)
		require.Empty(t, resp.GetAllocations(), "no allocation of %s left behind", pool)
	}
	_, err = e.derived("shop", "dual")
	require.True(t, apierrors.IsNotFound(err), "nothing is materialised without the VIPs")

	// Room in the IPv6 pool: both families, together.
	_, err = e.alloc.Release(ctxFor(t), &allocatorv1.ReleaseRequest{Name: fillers[0].GetName()})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		si, err = e.serviceImport("shop", "dual")
		return err == nil && len(si.Spec.IPs) == 2
	}, waitFor, tick)
	require.True(t, strings.Contains(si.Spec.IPs[0], "."), "IPv4 first: %v", si.Spec.IPs)
	require.Equal(t, fillers[0].GetAddress(), si.Spec.IPs[1])
	require.Equal(t, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, si.Spec.IPFamilies)
	require.Eventually(t, func() bool { return len(e.slicesOf(t, "shop", "dual")) == 1 }, waitFor, tick)
	got := im.get(t, "shop", "dual")
	require.Len(t, got.GetIps(), 2)
	// The member cluster is single-stack: the derived Service cannot hold
	// both VIPs, and Ready says so.
	require.Eventually(t, func() bool {
		si, err = e.serviceImport("shop", "dual")
		c := condition(si, "Ready")
		return err == nil && c != nil && c.Reason == "IPFamilyNotSupported"
	}, waitFor, tick)
}

func TestNamespaceMissingIsReportedNotCreated(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "vips", "10.96.100.0/24")
	east := sourcetest.Start(t, "east")
	east.Set(sourcetest.Endpoints("ghost", "web", []string{"http=80"}, "10.1.0.1"))
	im := e.startImporter(t, e.options("vips"), east)

	require.Eventually(t, func() bool {
		resp, err := im.api.GetServiceImport(ctxFor(t), &importerv1.GetServiceImportRequest{Name: importName("ghost", "web")})
		if err != nil {
			return false
		}
		for _, c := range resp.GetServiceImport().GetConditions() {
			if c.GetType() == "NamespaceMissing" && c.GetStatus() == importerv1.ConditionStatus_CONDITION_STATUS_TRUE {
				return true
			}
		}
		return false
	}, waitFor, tick)
	require.Eventually(t, func() bool {
		events, err := e.kube.CoreV1().Events(metav1.NamespaceDefault).List(ctxFor(t), metav1.ListOptions{})
		require.NoError(t, err)
		for _, ev := range events.Items {
			if ev.Reason == "NamespaceMissing" && ev.InvolvedObject.Kind == "Namespace" && ev.InvolvedObject.Name == "ghost" {
				return true
			}
		}
		return false
	}, waitFor, tick, "a Warning Event on the namespace")
	_, err := e.kube.CoreV1().Namespaces().Get(ctxFor(t), "ghost", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the importer does not create namespaces")

	e.namespace(t, "ghost")
	require.Eventually(t, func() bool {
		_, err := e.serviceImport("ghost", "web")
		return err == nil && len(e.slicesOf(t, "ghost", "web")) == 1
	}, waitFor, tick, "the import follows once the namespace exists")
}

func TestPushedImport(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "vips", "10.96.100.0/24")
	e.namespace(t, "shop")
	east := sourcetest.Start(t, "east")
	im := e.startImporter(t, e.options("vips"), east)

	eps := sourcetest.Endpoints("shop", "vm", []string{"ssh=22"}, "10.3.0.1", "10.3.0.2")
	eps.Cluster = "vm-fleet"
	resp, err := im.api.ApplyImport(ctxFor(t), &importerv1.ApplyImportRequest{Endpoints: eps, RequestId: "r1"})
	require.NoError(t, err)
	require.Equal(t, importName("shop", "vm"), resp.GetServiceImport().GetName())
	require.Equal(t, "push", resp.GetServiceImport().GetClusters()[0].GetOrigin())
	again, err := im.api.ApplyImport(ctxFor(t), &importerv1.ApplyImportRequest{Endpoints: eps, RequestId: "r1"})
	require.NoError(t, err)
	require.Equal(t, resp.GetServiceImport().GetName(), again.GetServiceImport().GetName())
	require.Eventually(t, func() bool {
		return fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "vm"))) == "map[vm-fleet:2]"
	}, waitFor, tick)

	// A configured source's exports come from its stream only.
	eps.Cluster = "east"
	_, err = im.api.ApplyImport(ctxFor(t), &importerv1.ApplyImportRequest{Endpoints: eps})
	require.ErrorContains(t, err, "configured source")

	w, err := im.api.WithdrawImport(ctxFor(t), &importerv1.WithdrawImportRequest{Service: "namespaces/shop/services/vm", Cluster: "vm-fleet"})
	require.NoError(t, err)
	require.True(t, w.GetRemoved())
	e.gone(t, "shop", "vm")
	_, err = im.api.WithdrawImport(ctxFor(t), &importerv1.WithdrawImportRequest{Service: "namespaces/shop/services/vm", Cluster: "vm-fleet"})
	require.Equal(t, "IMPORT_NOT_FOUND", apierr.Reason(err))
	_, err = im.api.WithdrawImport(ctxFor(t), &importerv1.WithdrawImportRequest{Service: "namespaces/shop/services/vm", Cluster: "vm-fleet", AllowMissing: true})
	require.NoError(t, err)
}

// TestSourceReplicas: a source cluster served by two membership replicas
// (--source east=A,B). When the replica the importer streams from goes
// away, the importer goes on with the other (whose revisions are its own,
// so it starts from its snapshot) and loses no change.
func TestSourceReplicas(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "vips", "10.96.100.0/24")
	e.namespace(t, "shop")
	replicas := []*sourcetest.Source{sourcetest.Start(t, "east"), sourcetest.Start(t, "east")}
	// The replicas serve one cluster's state, as two membership replicas
	// watching one kube-apiserver do.
	set := func(name string, addrs ...string) {
		for _, r := range replicas {
			r.Set(sourcetest.Endpoints("shop", name, []string{"http=80"}, addrs...))
		}
	}
	set("web", "10.1.0.1")
	set("cart", "10.1.1.1")
	o := e.options("vips")
	o.Sources = []string{"east=" + replicas[0].Addr() + "," + replicas[1].Addr()}
	e.startImporter(t, o)
	require.Eventually(t, func() bool {
		return fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "web"))) == "map[east:1]" &&
			fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "cart"))) == "map[east:1]"
	}, waitFor, tick)

	// Take down the replica with the stream right after a change, which
	// it may or may not have sent; then withdraw cart while it is away.
	streaming := 0
	require.Eventually(t, func() bool {
		for i, r := range replicas {
			if r.Watchers() > 0 {
				streaming = i
				return true
			}
		}
		return false
	}, waitFor, tick)
	set("web", "10.1.0.1", "10.1.0.2")
	replicas[streaming].Stop()
	other := replicas[1-streaming]
	other.Delete("namespaces/shop/services/cart")
	require.Eventually(t, func() bool { return other.Watchers() > 0 }, waitFor, tick, "the importer streams from the other replica")
	require.Eventually(t, func() bool {
		_, err := e.serviceImport("shop", "cart")
		return fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "web"))) == "map[east:2]" &&
			len(e.slicesOf(t, "shop", "cart")) == 0 && apierrors.IsNotFound(err)
	}, waitFor, tick, "the change made as the first replica went down, and the withdrawal made while it was away (slices and ServiceImport), arrive through the second")
	other.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, "10.1.0.1", "10.1.0.2", "10.1.0.3"))
	require.Eventually(t, func() bool { return fmt.Sprint(endpointsIn(e.slicesOf(t, "shop", "web"))) == "map[east:3]" }, waitFor, tick)
}
