package mcs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(minutes int) time.Time { return t0.Add(time.Duration(minutes) * time.Minute) }

func sp(name string, proto corev1.Protocol, port int32) mcsv1beta1.ServicePort {
	return mcsv1beta1.ServicePort{Name: name, Protocol: proto, Port: port}
}

func withApp(p mcsv1beta1.ServicePort, app string) mcsv1beta1.ServicePort {
	p.AppProtocol = &app
	return p
}

func export(cluster string, created time.Time, ports ...mcsv1beta1.ServicePort) Export {
	return Export{Cluster: cluster, Created: created, Type: mcsv1beta1.ClusterSetIP, Ports: ports}
}

func typed(e Export, t mcsv1beta1.ServiceImportType) Export {
	e.Type = t
	return e
}

func affinity(e Export, a corev1.ServiceAffinity, timeout ...int32) Export {
	e.SessionAffinity = a
	if len(timeout) > 0 {
		e.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout[0]}}
	}
	return e
}

func clientIP(seconds int32) *corev1.SessionAffinityConfig {
	return &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &seconds}}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	http := sp("http", corev1.ProtocolTCP, 80)
	tests := []struct {
		name      string
		exports   []Export
		ports     []mcsv1beta1.ServicePort
		typ       mcsv1beta1.ServiceImportType
		affinity  corev1.ServiceAffinity
		config    *corev1.SessionAffinityConfig
		conflicts []Conflict
		reason    string
	}{
		{
			name:     "one export passes through with defaults spelled out",
			exports:  []Export{export("a", at(0), sp("metrics", "", 9090), http)},
			ports:    []mcsv1beta1.ServicePort{http, sp("metrics", corev1.ProtocolTCP, 9090)},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityNone,
			reason:   ReasonNoConflicts,
		},
		{
			// As the MCS conformance suite wants it: the union, and a
			// conflict, since a client may reach a port some clusters
			// do not serve.
			name:     "disjoint ports are united, with a conflict",
			exports:  []Export{export("a", at(0), http), export("b", at(1), sp("grpc", corev1.ProtocolTCP, 9000))},
			ports:    []mcsv1beta1.ServicePort{http, sp("grpc", corev1.ProtocolTCP, 9000)},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityNone,
			reason:   ReasonPortConflict,
			conflicts: []Conflict{{Property: PropertyPorts, Reason: ReasonPortConflict, Clusters: []string{"a", "b"},
				Message: "the clusters export different port sets (a exports 1 of the 2 ports; b exports 1 of the 2 ports); the import carries their union"}},
		},
		{
			name:     "equal ports merge, unset protocol being TCP",
			exports:  []Export{export("a", at(0), withApp(http, "http")), export("b", at(1), withApp(sp("http", "", 80), "http"))},
			ports:    []mcsv1beta1.ServicePort{withApp(http, "http")},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityNone,
			reason:   ReasonNoConflicts,
		},
		{
			// The number is no clash (both are kept); the sets still
			// differ, which is a conflict.
			name: "the same number under other names and protocols is kept",
			exports: []Export{export("a", at(0), sp("dns", corev1.ProtocolUDP, 53)),
				export("b", at(1), sp("dns-tcp", corev1.ProtocolTCP, 53))},
			ports:    []mcsv1beta1.ServicePort{sp("dns-tcp", corev1.ProtocolTCP, 53), sp("dns", corev1.ProtocolUDP, 53)},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityNone,
			reason:   ReasonPortConflict,
			conflicts: []Conflict{{Property: PropertyPorts, Reason: ReasonPortConflict, Clusters: []string{"a", "b"},
				Message: "the clusters export different port sets (a exports 1 of the 2 ports; b exports 1 of the 2 ports); the import carries their union"}},
		},
		{
			name:     "same name, other protocol: the oldest wins",
			exports:  []Export{export("b", at(1), sp("http", corev1.ProtocolUDP, 80)), export("a", at(0), http)},
			ports:    []mcsv1beta1.ServicePort{http},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityNone,
			conflicts: []Conflict{{Property: PropertyPorts, Reason: ReasonPortConflict, Clusters: []string{"a", "b"},
				Message: `port "http" 80/UDP from b conflicts with "http" 80/TCP from a; the older ports are kept`}},
			reason: ReasonPortConflict,
		},
		{
			name:     "same name, other number",
			exports:  []Export{export("a", at(0), http), export("b", at(1), sp("http", corev1.ProtocolTCP, 8080))},
			ports:    []mcsv1beta1.ServicePort{http},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityNone,
			conflicts: []Conflict{{Property: PropertyPorts, Reason: ReasonPortConflict, Clusters: []string{"a", "b"},
				Message: `port "http" 8080/TCP from b conflicts with "http" 80/TCP from a; the older ports are kept`}},
			reason: ReasonPortConflict,
		},
		{
			name:     "same protocol and number, other name",
			exports:  []Export{export("a", at(0), http), export("b", at(1), sp("web", corev1.ProtocolTCP, 80))},
			ports:    []mcsv1beta1.ServicePort{http},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityNone,
			conflicts: []Conflict{{Property: PropertyPorts, Reason: ReasonPortConflict, Clusters: []string{"a", "b"},
				Message: `port "web" 80/TCP from b conflicts with "http" 80/TCP from a; the older ports are kept`}},
			reason: ReasonPortConflict,
		},
		{
			name:     "other application protocol",
			exports:  []Export{export("a", at(0), withApp(http, "http")), export("b", at(1), withApp(http, "kubernetes.io/h2c"))},
			ports:    []mcsv1beta1.ServicePort{withApp(http, "http")},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityNone,
			conflicts: []Conflict{{Property: PropertyPorts, Reason: ReasonPortConflict, Clusters: []string{"a", "b"},
				Message: `port "http" 80/TCP (kubernetes.io/h2c) from b conflicts with "http" 80/TCP (http) from a; the older ports are kept`}},
			reason: ReasonPortConflict,
		},
		{
			name:     "an unnamed port cannot join named ones",
			exports:  []Export{export("a", at(0), sp("", corev1.ProtocolTCP, 80)), export("b", at(1), sp("grpc", corev1.ProtocolTCP, 9000))},
			ports:    []mcsv1beta1.ServicePort{sp("", corev1.ProtocolTCP, 80)},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityNone,
			conflicts: []Conflict{{Property: PropertyPorts, Reason: ReasonPortConflict, Clusters: []string{"a", "b"},
				Message: `port "grpc" 9000/TCP from b cannot join unnamed 80/TCP from a: a Service with several ports must name them all; the older ports are kept`}},
			reason: ReasonPortConflict,
		},
		{
			name: "several port conflicts name every cluster involved",
			exports: []Export{
				export("c", at(2), sp("http", corev1.ProtocolTCP, 81), sp("admin", corev1.ProtocolTCP, 9000)),
				export("b", at(1), http, sp("grpc", corev1.ProtocolTCP, 9000)),
				export("a", at(0), http),
			},
			ports:    []mcsv1beta1.ServicePort{http, sp("grpc", corev1.ProtocolTCP, 9000)},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityNone,
			conflicts: []Conflict{{Property: PropertyPorts, Reason: ReasonPortConflict, Clusters: []string{"a", "b", "c"},
				Message: `port "http" 81/TCP from c conflicts with "http" 80/TCP from a; ` +
					`port "admin" 9000/TCP from c conflicts with "grpc" 9000/TCP from b; the older ports are kept`}},
			reason: ReasonPortConflict,
		},
		{
			name:     "type: the oldest wins",
			exports:  []Export{export("b", at(1), http), typed(export("a", at(0), http), mcsv1beta1.Headless), export("c", at(2), http)},
			ports:    []mcsv1beta1.ServicePort{http},
			typ:      mcsv1beta1.Headless,
			affinity: corev1.ServiceAffinityNone,
			conflicts: []Conflict{{Property: PropertyType, Reason: ReasonTypeConflict, Clusters: []string{"a", "b", "c"},
				Message: "type Headless from a (oldest export) conflicts with ClusterSetIP from b, c; using Headless"}},
			reason: ReasonTypeConflict,
		},
		{
			name:     "equal creation times: the cluster name decides",
			exports:  []Export{typed(export("b", at(0), http), mcsv1beta1.Headless), export("a", at(0), http)},
			ports:    []mcsv1beta1.ServicePort{http},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityNone,
			conflicts: []Conflict{{Property: PropertyType, Reason: ReasonTypeConflict, Clusters: []string{"a", "b"},
				Message: "type ClusterSetIP from a (oldest export) conflicts with Headless from b; using ClusterSetIP"}},
			reason: ReasonTypeConflict,
		},
		{
			name:     "an unknown creation time ranks last",
			exports:  []Export{typed(export("a", time.Time{}, http), mcsv1beta1.Headless), export("z", at(5), http)},
			ports:    []mcsv1beta1.ServicePort{http},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityNone,
			conflicts: []Conflict{{Property: PropertyType, Reason: ReasonTypeConflict, Clusters: []string{"z", "a"},
				Message: "type ClusterSetIP from z (oldest export) conflicts with Headless from a; using ClusterSetIP"}},
			reason: ReasonTypeConflict,
		},
		{
			name: "session affinity: the oldest wins, with its timeout",
			exports: []Export{affinity(export("a", at(0), http), corev1.ServiceAffinityClientIP, 600),
				affinity(export("b", at(1), http), "")},
			ports:    []mcsv1beta1.ServicePort{http},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityClientIP,
			config:   clientIP(600),
			conflicts: []Conflict{{Property: PropertySessionAffinity, Reason: ReasonSessionAffinityConflict, Clusters: []string{"a", "b"},
				Message: "sessionAffinity ClientIP from a (oldest export) conflicts with None from b; using ClientIP"}},
			reason: ReasonSessionAffinityConflict,
		},
		{
			name: "ClientIP without a timeout is the default timeout",
			exports: []Export{affinity(export("a", at(0), http), corev1.ServiceAffinityClientIP),
				affinity(export("b", at(1), http), corev1.ServiceAffinityClientIP, corev1.DefaultClientIPServiceAffinitySeconds)},
			ports:    []mcsv1beta1.ServicePort{http},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityClientIP,
			config:   clientIP(corev1.DefaultClientIPServiceAffinitySeconds),
			reason:   ReasonNoConflicts,
		},
		{
			name: "ClientIP timeouts differ",
			exports: []Export{affinity(export("a", at(0), http), corev1.ServiceAffinityClientIP, 60),
				affinity(export("b", at(1), http), corev1.ServiceAffinityClientIP, 120)},
			ports:    []mcsv1beta1.ServicePort{http},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityClientIP,
			config:   clientIP(60),
			conflicts: []Conflict{{Property: PropertySessionAffinityConfig, Reason: ReasonSessionAffinityConfigConflict, Clusters: []string{"a", "b"},
				Message: "sessionAffinityConfig timeout 60s from a (oldest export) conflicts with timeout 120s from b; using timeout 60s"}},
			reason: ReasonSessionAffinityConfigConflict,
		},
		{
			name: "a headless import ignores session affinity",
			exports: []Export{typed(affinity(export("a", at(0), http), corev1.ServiceAffinityClientIP, 60), mcsv1beta1.Headless),
				typed(export("b", at(1), http), mcsv1beta1.Headless)},
			ports:    []mcsv1beta1.ServicePort{http},
			typ:      mcsv1beta1.Headless,
			affinity: corev1.ServiceAffinityNone,
			reason:   ReasonNoConflicts,
		},
		{
			name: "several properties conflict at once",
			exports: []Export{
				affinity(export("a", at(0), http), corev1.ServiceAffinityClientIP, 60),
				typed(export("b", at(1), sp("http", corev1.ProtocolTCP, 8080)), mcsv1beta1.Headless),
			},
			ports:    []mcsv1beta1.ServicePort{http},
			typ:      mcsv1beta1.ClusterSetIP,
			affinity: corev1.ServiceAffinityClientIP,
			config:   clientIP(60),
			conflicts: []Conflict{
				{Property: PropertyPorts, Reason: ReasonPortConflict, Clusters: []string{"a", "b"},
					Message: `port "http" 8080/TCP from b conflicts with "http" 80/TCP from a; the older ports are kept`},
				{Property: PropertyType, Reason: ReasonTypeConflict, Clusters: []string{"a", "b"},
					Message: "type ClusterSetIP from a (oldest export) conflicts with Headless from b; using ClusterSetIP"},
				{Property: PropertySessionAffinity, Reason: ReasonSessionAffinityConflict, Clusters: []string{"a", "b"},
					Message: "sessionAffinity ClientIP from a (oldest export) conflicts with None from b; using ClientIP"},
			},
			reason: "PortConflict,TypeConflict,SessionAffinityConflict",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			before := copyExports(tc.exports)
			got, err := Merge(tc.exports)
			require.NoError(t, err)
			require.Equal(t, before, tc.exports, "Merge must not modify its input")
			require.Equal(t, tc.ports, got.Ports)
			require.Equal(t, tc.typ, got.Type)
			require.Equal(t, tc.affinity, got.SessionAffinity)
			require.Equal(t, tc.config, got.SessionAffinityConfig)
			require.Equal(t, tc.conflicts, got.Conflicts)
			require.Equal(t, tc.reason, got.ConflictReason())
			require.Len(t, got.Clusters, len(tc.exports))
			require.IsIncreasing(t, got.Clusters)

			// Every order of the same exports merges to the same result.
			for rot := 1; rot < len(tc.exports); rot++ {
				other := append(copyExports(tc.exports[rot:]), copyExports(tc.exports[:rot])...)
				again, err := Merge(other)
				require.NoError(t, err)
				require.Equal(t, got, again)
			}
		})
	}
}

func TestMergeResultMessages(t *testing.T) {
	t.Parallel()
	r, err := Merge([]Export{
		typed(export("a", at(0), sp("http", corev1.ProtocolTCP, 80)), mcsv1beta1.Headless),
		export("b", at(1), sp("http", corev1.ProtocolUDP, 80)),
	})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, r.Precedence)
	require.Equal(t, "PortConflict,TypeConflict", r.ConflictReason())
	require.Equal(t, `port "http" 80/UDP from b conflicts with "http" 80/TCP from a; the older ports are kept; `+
		"type Headless from a (oldest export) conflicts with ClusterSetIP from b; using Headless", r.ConflictMessage())
}

func TestMergeErrors(t *testing.T) {
	t.Parallel()
	http := sp("http", corev1.ProtocolTCP, 80)
	tests := []struct {
		name    string
		exports []Export
		want    error
	}{
		{"no exports", nil, ErrNoExports},
		{"no cluster name", []Export{export("", at(0), http)}, ErrNoCluster},
		{"cluster twice", []Export{export("a", at(0), http), export("a", at(1), http)}, ErrDuplicateCluster},
		{"no type", []Export{typed(export("a", at(0), http), "")}, ErrInvalidType},
		{"unknown type", []Export{typed(export("a", at(0), http), "LoadBalancer")}, ErrInvalidType},
		{"unknown affinity", []Export{affinity(export("a", at(0), http), "Cookie")}, ErrInvalidSessionAffinity},
		{"zero timeout", []Export{affinity(export("a", at(0), http), corev1.ServiceAffinityClientIP, 0)}, ErrInvalidAffinityTimeout},
		{"timeout over a day", []Export{affinity(export("a", at(0), http), corev1.ServiceAffinityClientIP, 86401)}, ErrInvalidAffinityTimeout},
		{"port zero", []Export{export("a", at(0), sp("http", corev1.ProtocolTCP, 0))}, ErrInvalidPort},
		{"port too large", []Export{export("a", at(0), sp("http", corev1.ProtocolTCP, 65536))}, ErrInvalidPort},
		{"unknown protocol", []Export{export("a", at(0), sp("ping", "ICMP", 1))}, ErrInvalidPort},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Merge(tc.exports)
			require.ErrorIs(t, err, tc.want)
		})
	}
}

func copyExports(in []Export) []Export {
	out := make([]Export, len(in))
	for i, e := range in {
		out[i] = e
		out[i].Ports = nil
		for _, p := range e.Ports {
			out[i].Ports = append(out[i].Ports, *p.DeepCopy())
		}
		out[i].SessionAffinityConfig = e.SessionAffinityConfig.DeepCopy()
	}
	return out
}

// TestMergeTrafficAndMetadata: the oldest export's internal traffic
// policy, traffic distribution and exported labels and annotations win;
// any difference is a conflict with the mcs-api reason.
func TestMergeTrafficAndMetadata(t *testing.T) {
	http := sp("http", corev1.ProtocolTCP, 80)
	a, b := export("a", at(0), http), export("b", at(1), http)
	a.InternalTrafficPolicy, a.TrafficDistribution = "Local", "PreferClose"
	a.Labels, a.Annotations = map[string]string{"tier": "web"}, map[string]string{"note": "a"}
	b.InternalTrafficPolicy, b.TrafficDistribution = "Local", "PreferClose"
	b.Labels, b.Annotations = map[string]string{"tier": "web"}, map[string]string{"note": "a"}

	r, err := Merge([]Export{b, a})
	require.NoError(t, err)
	require.Empty(t, r.Conflicts)
	require.Equal(t, corev1.ServiceInternalTrafficPolicyLocal, *r.InternalTrafficPolicy)
	require.Equal(t, "PreferClose", *r.TrafficDistribution)
	require.Equal(t, map[string]string{"tier": "web"}, r.Labels)

	b.InternalTrafficPolicy, b.TrafficDistribution = "", "PreferSameZone"
	b.Labels, b.Annotations = map[string]string{"tier": "api"}, nil
	r, err = Merge([]Export{b, a})
	require.NoError(t, err)
	require.Equal(t, "InternalTrafficPolicyConflict,TrafficDistributionConflict,LabelsConflict,AnnotationsConflict", r.ConflictReason())
	require.Equal(t, corev1.ServiceInternalTrafficPolicyLocal, *r.InternalTrafficPolicy, "the oldest wins")
	require.Equal(t, map[string]string{"tier": "web"}, r.Labels)
	require.Equal(t, map[string]string{"note": "a"}, r.Annotations)
	for _, c := range r.Conflicts {
		require.Equal(t, []string{"a", "b"}, c.Clusters)
	}
	require.Contains(t, r.ConflictMessage(), "internalTrafficPolicy Local from a (oldest export) conflicts with unset from b")
}

// TestMergeIPFamilies: clusters exporting different IP families conflict
// (IPFamilyConflict, every cluster named); the same families in another
// order do not; an export of unknown families takes no part.
func TestMergeIPFamilies(t *testing.T) {
	http := sp("http", corev1.ProtocolTCP, 80)
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	a, b, c := export("a", at(0), http), export("b", at(1), http), export("c", at(2), http)
	a.IPFamilies, b.IPFamilies = []corev1.IPFamily{v4, v6}, []corev1.IPFamily{v6, v4}
	r, err := Merge([]Export{a, b, c})
	require.NoError(t, err)
	require.Empty(t, r.Conflicts, "same set, other order; c unknown")
	require.Equal(t, []corev1.IPFamily{v4, v6}, r.IPFamilies, "the oldest export's families")

	b.IPFamilies = []corev1.IPFamily{v4}
	c.IPFamilies = []corev1.IPFamily{v4}
	r, err = Merge([]Export{c, b, a})
	require.NoError(t, err)
	require.Equal(t, ReasonIPFamilyConflict, r.ConflictReason())
	require.Equal(t, PropertyIPFamilies, r.Conflicts[0].Property)
	require.Equal(t, []string{"a", "b", "c"}, r.Conflicts[0].Clusters)
	require.Equal(t, "ipFamilies differ (a IPv4+IPv6, b IPv4, c IPv4): "+
		"traffic of a family reaches only the clusters that export it", r.ConflictMessage())

	a.IPFamilies = nil
	r, err = Merge([]Export{a, b, c})
	require.NoError(t, err)
	require.Empty(t, r.Conflicts, "a's families are unknown")
	require.Equal(t, []corev1.IPFamily{v4}, r.IPFamilies, "the oldest export that names any")
}
