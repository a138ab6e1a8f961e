package materialize

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/services/importer/mcs"
	islices "github.com/plexusnet/plexus/services/importer/slices"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func managed() map[string]string {
	return map[string]string{mcsnames.LabelAppManagedBy: mcsnames.ManagedBy}
}

func endpoints(from, to int) []discovery.Endpoint {
	var out []discovery.Endpoint
	for i := from; i < to; i++ {
		ready := true
		out = append(out, discovery.Endpoint{Addresses: []string{fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)}, Conditions: discovery.EndpointConditions{Ready: &ready}})
	}
	return out
}

func export(cluster string, age time.Duration, port int32, eps ...discovery.Endpoint) Export {
	name, proto := "http", corev1.ProtocolTCP
	ready := 0
	for _, ep := range eps {
		if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
			ready++
		}
	}
	return Export{
		Cluster:   cluster,
		Endpoints: len(eps),
		Ready:     ready,
		Properties: mcs.Export{Created: t0.Add(-age), Type: mcsv1beta1.ClusterSetIP, SessionAffinity: corev1.ServiceAffinityNone,
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: port}}},
		Groups: []islices.Group{{AddressType: discovery.AddressTypeIPv4,
			Ports: []discovery.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}}, Endpoints: eps}},
	}
}

func view(exports ...Export) View {
	return View{Namespace: "shop", Name: "web", Exports: exports, NamespaceExists: true, Slices: map[string][]*discovery.EndpointSlice{}}
}

func importObj() *mcsv1beta1.ServiceImport {
	return &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "si-uid", Labels: managed()}}
}

func TestDecide(t *testing.T) {
	foreign := importObj()
	foreign.Labels = nil
	broken := export("east", time.Hour, 80)
	broken.Properties.Type = "Bogus"
	tests := []struct {
		name    string
		v       View
		verdict Verdict
		reason  string
	}{
		{"no export", view(), Withdrawn, ""},
		{"exported", view(export("east", time.Hour, 80)), Materialize, ""},
		{"foreign ServiceImport", func() View { v := view(export("east", time.Hour, 80)); v.Import = foreign; return v }(), Hold, ReasonImportNotManaged},
		{"namespace missing", func() View { v := view(export("east", time.Hour, 80)); v.NamespaceExists = false; return v }(), Hold, ReasonNamespaceMissing},
		{"no valid export", view(broken), Hold, ReasonInvalidExport},
		{"one valid export", view(broken, export("west", time.Minute, 80)), Materialize, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.v)
			require.Equal(t, tc.verdict, d.Verdict)
			if tc.reason != "" {
				require.Equal(t, tc.reason, d.Problem.Reason)
			}
		})
	}
	d := Decide(view(broken, export("west", time.Minute, 80)))
	require.Contains(t, d.Excluded, "east", "the broken export is left out and named")
}

func TestChooseVIPs(t *testing.T) {
	v := view(export("east", time.Hour, 80))
	d := Decide(v)
	down := errors.New("allocator down")

	got := ChooseVIPs(v, d, true, []string{"fd00::5", "10.9.0.5"}, nil)
	require.Equal(t, []string{"10.9.0.5", "fd00::5"}, got.IPs, "IPv4 first")
	require.True(t, got.FromAllocator)

	got = ChooseVIPs(v, d, true, nil, down)
	require.ErrorIs(t, got.Err, down, "the import waits for its VIPs")

	withIPs := v
	withIPs.Import = importObj()
	withIPs.Import.Spec.IPs = []string{"10.9.0.5"}
	got = ChooseVIPs(withIPs, d, true, nil, down)
	require.NoError(t, got.Err)
	require.ErrorIs(t, got.Kept, down)
	require.Equal(t, []string{"10.9.0.5"}, got.IPs, "an allocator outage keeps the VIPs the import carries")

	own := v
	own.Derived = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Labels: managed()}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.7", ClusterIPs: []string{"10.96.0.7"}}}
	require.Equal(t, []string{"10.96.0.7"}, ChooseVIPs(own, d, false, nil, nil).IPs, "without pools: the derived Service's own IPs")

	headless := export("east", time.Hour, 80)
	headless.Properties.Type = mcsv1beta1.Headless
	hv := view(headless)
	require.Empty(t, ChooseVIPs(hv, Decide(hv), true, []string{"10.9.0.5"}, nil).IPs)
}

func TestImportWrittenOnlyWhenItDiffers(t *testing.T) {
	v := view(export("east", time.Hour, 80))
	d := Decide(v)
	vips := VIPs{IPs: []string{"10.9.0.5"}, FromAllocator: true}

	created := Import(v, d, vips)
	require.NotNil(t, created)
	require.Equal(t, []string{"10.9.0.5"}, created.Spec.IPs)
	require.Equal(t, []corev1.IPFamily{corev1.IPv4Protocol}, created.Spec.IPFamilies)
	require.True(t, mcsnames.Managed(created.Labels))

	v.Import = created
	require.Nil(t, Import(v, d, vips), "unchanged: no write")

	headless := export("east", time.Hour, 80)
	headless.Properties.Type, headless.Properties.IPFamilies = mcsv1beta1.Headless, []corev1.IPFamily{corev1.IPv4Protocol}
	hv := view(headless)
	hi := Import(hv, Decide(hv), VIPs{})
	require.Empty(t, hi.Spec.IPs)
	require.Equal(t, []corev1.IPFamily{corev1.IPv4Protocol}, hi.Spec.IPFamilies, "a headless import's families are its exports'")
	pending := view(export("east", time.Hour, 80))
	pending.Exports[0].Properties.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
	require.Empty(t, Import(pending, Decide(pending), VIPs{}).Spec.IPFamilies, "a ClusterSetIP import's families are its VIPs'")

	v2 := view(export("east", time.Hour, 81))
	v2.Import = created
	upd := Import(v2, Decide(v2), vips)
	require.NotNil(t, upd)
	require.Equal(t, int32(81), upd.Spec.Ports[0].Port)
}

func TestDerived(t *testing.T) {
	v := view(export("east", time.Hour, 80))
	d := Decide(v)
	imp := importObj()
	vips := VIPs{IPs: []string{"10.9.0.5"}, FromAllocator: true}

	op, want := Derived(v, d, imp, vips)
	require.Equal(t, DerivedCreate, op)
	require.Equal(t, "10.9.0.5", want.Spec.ClusterIP, "the VIP is pinned as the cluster IP")
	require.Equal(t, types.UID("si-uid"), want.OwnerReferences[0].UID)
	require.True(t, PinsVIPs(want))
	require.False(t, PinsVIPs(WithoutVIPs(want)))

	v.Derived = want
	op, _ = Derived(v, d, imp, vips)
	require.Equal(t, DerivedNone, op)

	v3 := view(export("east", time.Hour, 81))
	v3.Derived = want
	op, upd := Derived(v3, Decide(v3), imp, vips)
	require.Equal(t, DerivedUpdate, op)
	require.Equal(t, int32(81), upd.Spec.Ports[0].Port)
	require.Equal(t, "10.9.0.5", upd.Spec.ClusterIP, "cluster IPs are immutable and kept")

	headless := export("east", time.Hour, 80)
	headless.Properties.Type = mcsv1beta1.Headless
	hv := view(headless)
	hv.Derived = want
	op, _ = Derived(hv, Decide(hv), imp, VIPs{})
	require.Equal(t, DerivedReplace, op)

	foreign := view(export("east", time.Hour, 80))
	foreign.Derived = &corev1.Service{}
	op, _ = Derived(foreign, d, imp, vips)
	require.Equal(t, DerivedForeign, op)
}

func slice(name, cluster string, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	tmpl := islices.ImportTemplate("shop", mcsnames.DerivedServiceName("web"), "svc-uid", "web", cluster)
	port, pname, proto := int32(80), "http", corev1.ProtocolTCP
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: tmpl.Labels, OwnerReferences: tmpl.OwnerReferences, ResourceVersion: "1"},
		AddressType: discovery.AddressTypeIPv4, Endpoints: eps,
		Ports: []discovery.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	}
}

func derivedObj() *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: mcsnames.DerivedServiceName("web"), UID: "svc-uid", Labels: managed()}}
}

func TestPlanSlices(t *testing.T) {
	p, err := islices.New()
	require.NoError(t, err)
	bad := endpoints(5, 6)[0]
	bad.Addresses = []string{"127.0.0.1"}
	unusable := export("north", time.Hour, 80)
	unusable.Unusable = errors.New("group 0: address type unset")

	v := view(export("east", time.Hour, 80, append(endpoints(0, 3), bad)...), unusable)
	v.Slices["west"] = []*discovery.EndpointSlice{slice("w1", "west", endpoints(10, 12)...)}
	v.Slices["gone"] = []*discovery.EndpointSlice{slice("g1", "gone", endpoints(20, 21)...)}
	v.Slices["north"] = []*discovery.EndpointSlice{slice("n1", "north", endpoints(30, 31)...)}
	final := func(cluster string) bool { return cluster == "gone" }

	plans := map[string]ClusterPlan{}
	for _, cp := range PlanSlices(p, v, derivedObj(), Steering{}, final) {
		plans[cp.Cluster] = cp
	}
	require.Len(t, plans, 4)
	require.Len(t, plans["east"].Plan.Create, 1)
	require.Len(t, plans["east"].Plan.Create[0].Endpoints, 3, "the valid endpoints are planned")
	require.Len(t, plans["east"].Plan.Dropped, 1, "the loopback endpoint is dropped")
	require.Equal(t, 4, plans["east"].Exported)
	require.True(t, plans["west"].Waiting, "a cluster whose word is not final keeps its slices")
	require.Len(t, plans["gone"].Plan.Delete, 1, "a final cluster's slices go")
	require.Error(t, plans["north"].Skipped, "unusable endpoints leave the slices as they are")
	require.True(t, plans["north"].Plan.Empty())
}

// TestPlanSlicesPortConflict: two clusters export a port under one name
// with other numbers; the import carries the oldest's, so the other
// cluster's slices leave that port out (its endpoints get none of its
// traffic) and keep the rest.
func TestPlanSlicesPortConflict(t *testing.T) {
	p, err := islices.New()
	require.NoError(t, err)
	east := export("east", 2*time.Hour, 42, endpoints(0, 1)...)
	west := export("west", time.Hour, 4242, endpoints(10, 11)...)
	metrics, proto, port := "metrics", corev1.ProtocolTCP, int32(9090)
	west.Properties.Ports = append(west.Properties.Ports, mcsv1beta1.ServicePort{Name: metrics, Protocol: proto, Port: port})
	west.Groups[0].Ports = append(west.Groups[0].Ports, discovery.EndpointPort{Name: &metrics, Protocol: &proto, Port: &port})
	derived := derivedObj()
	derived.Spec.Ports = []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 42}, {Name: metrics, Protocol: proto, Port: port}}
	plans := map[string]ClusterPlan{}
	for _, cp := range PlanSlices(p, view(east, west), derived, Steering{}, func(string) bool { return true }) {
		plans[cp.Cluster] = cp
	}
	portNames := func(cp ClusterPlan) []string {
		var names []string
		for _, p := range cp.Plan.Create[0].Ports {
			names = append(names, *p.Name)
		}
		return names
	}
	require.Equal(t, []string{"http"}, portNames(plans["east"]), "the winner keeps its port")
	require.Equal(t, []string{metrics}, portNames(plans["west"]), "the loser's http port is left out, its other port kept")
	require.Len(t, west.Groups[0].Ports, 2, "the export itself is not changed")
}

// A cluster the caller marks unchanged is not planned: its export's
// endpoints need not even be converted, and nothing is written for it,
// while the clusters beside it are planned as ever.
func TestPlanSlicesUnchanged(t *testing.T) {
	p, err := islices.New()
	require.NoError(t, err)
	east := export("east", time.Hour, 80, endpoints(0, 3)...)
	west := export("west", time.Hour, 80, endpoints(10, 12)...)
	west.Groups = nil // not converted: the caller knows its slices are right
	v := view(east, west)
	v.Slices["west"] = []*discovery.EndpointSlice{slice("w1", "west", endpoints(10, 12)...)}
	v.Unchanged = map[string]bool{"west": true}
	plans := map[string]ClusterPlan{}
	for _, cp := range PlanSlices(p, v, derivedObj(), Steering{}, func(string) bool { return true }) {
		plans[cp.Cluster] = cp
	}
	require.True(t, plans["west"].Plan.Empty(), "without the mark, no groups would delete west's slice")
	require.Equal(t, west.Endpoints, plans["west"].Exported)
	require.Len(t, plans["east"].Plan.Create, 1)

	v.Unchanged = nil
	plans = map[string]ClusterPlan{}
	for _, cp := range PlanSlices(p, v, derivedObj(), Steering{}, func(string) bool { return true }) {
		plans[cp.Cluster] = cp
	}
	require.False(t, plans["west"].Plan.Empty(), "the same view unmarked is planned")
}

func TestRemove(t *testing.T) {
	v := view()
	v.Import, v.Derived = importObj(), derivedObj()
	v.Slices["east"] = []*discovery.EndpointSlice{slice("e1", "east")}
	v.Slices["west"] = []*discovery.EndpointSlice{slice("w1", "west")}

	rm := Remove(v, func(c string) bool { return c == "east" })
	require.True(t, rm.Blocked)
	require.Len(t, rm.Slices["east"], 1)
	require.Nil(t, rm.Derived, "what owns the waiting slices stays")
	require.Nil(t, rm.Import)

	rm = Remove(v, func(string) bool { return true })
	require.False(t, rm.Blocked)
	require.NotNil(t, rm.Derived)
	require.NotNil(t, rm.Import)

	v.Import.Labels, v.Derived.Labels = nil, nil
	rm = Remove(v, func(string) bool { return true })
	require.Nil(t, rm.Derived, "never a Service that is not the importer's")
	require.Nil(t, rm.Import)
}

func TestAfterWrites(t *testing.T) {
	a, b, c := slice("a", "east", endpoints(0, 2)...), slice("b", "east", endpoints(2, 4)...), slice("c", "east", endpoints(4, 6)...)
	b2 := slice("b", "east", endpoints(2, 3)...)
	n := slice("n", "east", endpoints(6, 9)...)
	got := AfterWrites([]*discovery.EndpointSlice{a, b, c}, Applied{Created: []*discovery.EndpointSlice{n}, Updated: []*discovery.EndpointSlice{b2}, Deleted: []*discovery.EndpointSlice{c}})
	total, _ := countSlices(got)
	require.Equal(t, 2+1+3, total)
	require.Len(t, got, 3)
}

func condition(st Status, typ string) Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return Condition{}
}

// TestReport: Ready and the counts come from what was written; a partly
// applied plan is not Ready.
func TestReport(t *testing.T) {
	v := view(export("east", time.Hour, 80, endpoints(0, 150)...), export("west", time.Minute, 80, endpoints(200, 210)...))
	v.Import = importObj()
	d := Decide(v)
	vips := VIPs{IPs: []string{"10.9.0.5"}, FromAllocator: true}
	derived := derivedObj()
	derived.Spec.ClusterIPs = []string{"10.9.0.5"}
	full := map[string][]*discovery.EndpointSlice{
		"east": {slice("e1", "east", endpoints(0, 100)...), slice("e2", "east", endpoints(100, 150)...)},
		"west": {slice("w1", "west", endpoints(200, 210)...)},
	}
	ok := &Outcome{VIPs: vips, Derived: derived, Clusters: map[string]ClusterOutcome{}}
	st := Report(v, d, full, ok)
	require.Equal(t, metav1.ConditionTrue, condition(st, ConditionReady).Status)
	require.Equal(t, metav1.ConditionTrue, condition(st, ConditionVIPAllocated).Status)
	require.Equal(t, metav1.ConditionFalse, condition(st, ConditionEndpointsDropped).Status)
	require.Equal(t, 3, st.EndpointSlices)
	require.Equal(t, 150, st.Clusters[0].Endpoints)

	// east's second write failed: 100 of its 150 endpoints are written.
	partial := map[string][]*discovery.EndpointSlice{"east": full["east"][:1], "west": full["west"]}
	failed := &Outcome{VIPs: vips, Derived: derived, Clusters: map[string]ClusterOutcome{
		"east": {WriteErr: errors.New("EndpointSlice is invalid"), Exported: 150},
	}}
	st = Report(v, d, partial, failed)
	ready := condition(st, ConditionReady)
	require.Equal(t, metav1.ConditionFalse, ready.Status, "a partly written import is not Ready")
	require.Equal(t, ReasonSlicesNotWritten, ready.Reason)
	require.Equal(t, []string{"east"}, ready.Clusters)
	require.Equal(t, 100, st.Clusters[0].Endpoints, "counts are what was written")
	require.Equal(t, 150, st.Clusters[0].Exported)
	require.Contains(t, st.Clusters[0].Problem, "slices not written")

	dropped := &Outcome{VIPs: vips, Derived: derived, Clusters: map[string]ClusterOutcome{
		"west": {Exported: 11, Dropped: []islices.Dropped{{Err: islices.ErrInvalidEndpoint}}},
	}}
	st = Report(v, d, full, dropped)
	require.Equal(t, metav1.ConditionTrue, condition(st, ConditionReady).Status, "the valid endpoints are written")
	require.Equal(t, metav1.ConditionTrue, condition(st, ConditionEndpointsDropped).Status)
	require.Equal(t, []string{"west"}, condition(st, ConditionEndpointsDropped).Clusters)

	pending := &Outcome{VIPs: VIPs{FromAllocator: true, Err: errors.New("pool exhausted")}, Clusters: map[string]ClusterOutcome{}}
	st = Report(v, d, full, pending)
	require.Equal(t, ReasonPending, condition(st, ConditionReady).Reason)
	require.Equal(t, ReasonAllocationFailed, condition(st, ConditionVIPAllocated).Reason)

	own := derived.DeepCopy()
	own.Spec.ClusterIPs = []string{"10.96.0.9"}
	st = Report(v, d, full, &Outcome{VIPs: vips, Derived: own, Clusters: map[string]ClusterOutcome{}})
	require.Equal(t, ReasonClusterSetIPNotProgrammed, condition(st, ConditionReady).Reason)

	// A replica that did not reconcile reports what the leader wrote.
	v.Import.Status.Conditions = []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonSlicesNotWritten, Message: "m"}}
	st = Report(v, d, full, nil)
	require.Equal(t, ReasonSlicesNotWritten, condition(st, ConditionReady).Reason)
	require.Equal(t, ConditionConflict, st.Conditions[0].Type, "the conflict is computed from the exports")
}

func TestImportStatusAndEvents(t *testing.T) {
	v := view(export("east", time.Hour, 80, endpoints(0, 3)...), export("west", time.Minute, 81, endpoints(3, 6)...))
	v.Import = importObj()
	v.Import.Generation = 4
	d := Decide(v)
	st := Report(v, d, map[string][]*discovery.EndpointSlice{}, &Outcome{
		VIPs:     VIPs{IPs: []string{"10.9.0.5"}, FromAllocator: true},
		Clusters: map[string]ClusterOutcome{"west": {WriteErr: errors.New("refused")}},
	})
	out := ImportStatus(v.Import, st, []string{"east", "west"})
	require.Equal(t, []mcsv1beta1.ClusterStatus{{Cluster: "east"}, {Cluster: "west"}}, out.Clusters)
	require.Equal(t, mcsv1beta1.EndpointSliceObjectsAbsent, out.EndpointSliceObjects)
	for _, c := range out.Conditions {
		require.EqualValues(t, 4, c.ObservedGeneration)
	}

	var reasons []string
	for _, ev := range Events(v.Import.Status.Conditions, st.Conditions) {
		reasons = append(reasons, ev.Reason)
	}
	require.ElementsMatch(t, []string{ReasonExportConflict, ReasonSlicesNotWritten}, reasons)
	require.Empty(t, Events(out.Conditions, st.Conditions), "no Event when nothing changed")
}

func TestExportStatus(t *testing.T) {
	v := view(export("member", time.Hour, 80), export("west", time.Minute, 81))
	v.LocalCluster = "member"
	v.LocalExport = &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Generation: 2},
		Status: mcsv1beta1.ServiceExportStatus{Conditions: []metav1.Condition{{Type: "Valid", Status: metav1.ConditionTrue, Reason: "Valid"}}}}
	st := Report(v, Decide(v), nil, nil)

	out := ExportStatus(v, st)
	require.NotNil(t, out)
	c := meta.FindStatusCondition(out.Status.Conditions, "Conflict")
	require.Equal(t, metav1.ConditionTrue, c.Status)
	require.Equal(t, "PortConflict", c.Reason)
	require.EqualValues(t, 2, c.ObservedGeneration)
	require.NotNil(t, meta.FindStatusCondition(out.Status.Conditions, "Valid"), "membership's conditions are kept")

	v.LocalExport = out
	require.Nil(t, ExportStatus(v, st), "written once")

	other := v
	other.LocalCluster = "east" // exports nothing itself
	require.Nil(t, ExportStatus(other, st))
}

// TestImportCarriesTrafficAndMetadata: the ServiceImport carries the
// merged internal traffic policy, traffic distribution, exported labels and
// annotations; the derived Service the traffic fields; an exported label
// cannot take the importer's managed-by label away.
func TestImportCarriesTrafficAndMetadata(t *testing.T) {
	e := export("east", time.Hour, 80)
	e.Properties.InternalTrafficPolicy, e.Properties.TrafficDistribution = "Local", "PreferClose"
	e.Properties.Labels = map[string]string{"tier": "web", mcsnames.LabelAppManagedBy: "someone-else"}
	e.Properties.Annotations = map[string]string{"owner": "team-a"}
	v := view(e)
	d := Decide(v)
	si := Import(v, d, VIPs{})
	require.Equal(t, corev1.ServiceInternalTrafficPolicyLocal, *si.Spec.InternalTrafficPolicy)
	require.Equal(t, "PreferClose", *si.Spec.TrafficDistribution)
	require.Equal(t, "web", si.Labels["tier"])
	require.True(t, mcsnames.Managed(si.Labels), "the managed-by label stays the importer's")
	require.Equal(t, map[string]string{"owner": "team-a"}, si.Annotations)

	v.Import = si
	require.Nil(t, Import(v, d, VIPs{}), "unchanged: no write")

	op, svc := Derived(v, d, importObj(), VIPs{})
	require.Equal(t, DerivedCreate, op)
	require.Equal(t, corev1.ServiceInternalTrafficPolicyLocal, *svc.Spec.InternalTrafficPolicy)
	require.Equal(t, "PreferClose", *svc.Spec.TrafficDistribution)

	// As the API server returns it: an unset policy defaulted to Cluster.
	plain := view(export("east", time.Hour, 80))
	cur := derivedService(plain, Decide(plain), importObj(), VIPs{})
	cluster := corev1.ServiceInternalTrafficPolicyCluster
	cur.Spec.InternalTrafficPolicy = &cluster
	plain.Derived = cur
	op, _ = Derived(plain, Decide(plain), importObj(), VIPs{})
	require.Equal(t, DerivedNone, op, "a defaulted policy is no change")
}

// A cluster whose slices are kept while its export is not known (not
// heard from since a restart) stays among the import's clusters: its
// endpoints are still served. One whose slices went does not.
func TestImportClustersKeepsWaitingClusters(t *testing.T) {
	v := view(export("east", time.Hour, 80, endpoints(0, 3)...))
	slice := &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}}
	after := map[string][]*discovery.EndpointSlice{"east": {slice}, "west": {slice}, "gone": {}}
	require.Equal(t, []string{"east", "west"}, ImportClusters(v, after))
	require.Equal(t, []string{"east"}, ImportClusters(v, nil))

	v.Import = importObj()
	v.Import.Status.Clusters = []mcsv1beta1.ClusterStatus{{Cluster: "east"}, {Cluster: "west"}}
	st := Report(v, Decide(v), after, &Outcome{VIPs: VIPs{IPs: []string{"10.9.0.5"}, FromAllocator: true}, Clusters: map[string]ClusterOutcome{}})
	out := ImportStatus(v.Import, st, ImportClusters(v, after))
	require.Equal(t, v.Import.Status.Clusters, out.Clusters, "unchanged: nothing to write")
}
