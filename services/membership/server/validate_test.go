package server

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/services/membership/endpoints"
	"github.com/plexusnet/plexus/services/membership/registry"
)

func TestRegistrationNormalises(t *testing.T) {
	reg, err := registration(&membershipv1.Workload{
		Name:      "namespaces/prod/workloads/db-1.example",
		Labels:    map[string]string{"app.kubernetes.io/name": "db", "tier": ""},
		Addresses: []string{"2001:DB8:0:0::1", "192.0.2.10"},
		Ports: []*membershipv1.WorkloadPort{
			{Name: "sql", Port: 5432},
			{Name: "dns", Port: 53, Protocol: membershipv1.Protocol_PROTOCOL_UDP},
		},
		Zone:     "eu-west-1a",
		Node:     "host-7.rack-2",
		Hostname: "db-1",
		Ready:    true,
		Ttl:      durationpb.New(10 * time.Second),
	})
	require.NoError(t, err)
	require.Equal(t, registry.Registration{
		Namespace: "prod",
		Name:      "db-1.example",
		Labels:    map[string]string{"app.kubernetes.io/name": "db", "tier": ""},
		Addresses: []string{"2001:db8::1", "192.0.2.10"},
		Ports: []workloadv1alpha1.WorkloadPort{
			{Name: "sql", Port: 5432, Protocol: "TCP"},
			{Name: "dns", Port: 53, Protocol: "UDP"},
		},
		Zone: "eu-west-1a", Node: "host-7.rack-2", Hostname: "db-1",
		Ready: true,
		TTL:   10 * time.Second,
	}, reg)

	reg, err = registration(&membershipv1.Workload{Name: "namespaces/prod/workloads/vm", AddressPool: "pools/ext"})
	require.NoError(t, err)
	require.Equal(t, "pools/ext", reg.Pool)
	require.Empty(t, reg.Addresses)
	require.Zero(t, reg.TTL, "the default TTL is the registry's to fill in")
}

func TestRegistrationReportsEveryProblem(t *testing.T) {
	_, err := registration(&membershipv1.Workload{
		Name:      "namespaces/prod/workloads/vm",
		Labels:    map[string]string{"-bad": "ok", "good": "not ok!"},
		Addresses: []string{"::ffff:10.0.0.1", "0.0.0.0", "10.0.0.1"},
		Ports:     []*membershipv1.WorkloadPort{{Port: 80}, {Port: 81, Protocol: 9}},
		Zone:      "zone a",
		Node:      "Node_1",
		Hostname:  "a.b",
		Ttl:       durationpb.New(1500 * time.Millisecond),
	})
	require.Equal(t, ReasonInvalidArgument, apierr.Reason(err))
	var fields []string
	for _, v := range apierr.FieldViolations(err) {
		fields = append(fields, v.Field)
	}
	require.ElementsMatch(t, []string{
		"workload.labels[-bad]",
		"workload.labels[good]",
		"workload.addresses",
	}, fields[:3:3], "too many addresses stops the address checks: %v", fields)
	require.Contains(t, fields, "workload.ports[0].name")
	require.Contains(t, fields, "workload.ports[1].name")
	require.Contains(t, fields, "workload.ports[1].protocol")
	require.Contains(t, fields, "workload.zone")
	require.Contains(t, fields, "workload.node")
	require.Contains(t, fields, "workload.hostname")
	require.Contains(t, fields, "workload.ttl")

	_, err = registration(nil)
	require.Equal(t, "workload", apierr.FieldViolations(err)[0].Field)
}

func TestAddressRules(t *testing.T) {
	tests := []struct {
		in   []string
		want []string
		bad  string
	}{
		{in: []string{"10.1.2.3"}, want: []string{"10.1.2.3"}},
		{in: []string{"fd00::0:1"}, want: []string{"fd00::1"}},
		{in: []string{"10.1.2.3", "fd00::1"}, want: []string{"10.1.2.3", "fd00::1"}},
		{in: []string{"::ffff:10.1.2.3"}, bad: "workload.addresses[0]"},
		{in: []string{"169.254.0.1"}, bad: "workload.addresses[0]"},
		{in: []string{"ff02::1"}, bad: "workload.addresses[0]"},
		{in: []string{"::"}, bad: "workload.addresses[0]"},
		{in: []string{" 10.1.2.3"}, bad: "workload.addresses[0]"},
		{in: []string{"fd00::1", "fd00::2"}, bad: "workload.addresses[1]"},
	}
	for _, tc := range tests {
		var v violations
		got := addresses(&v, tc.in)
		if tc.bad == "" {
			require.Empty(t, v, "%v", tc.in)
			require.Equal(t, tc.want, got)
			continue
		}
		require.Len(t, v, 1, "%v", tc.in)
		require.Equal(t, tc.bad, v[0].Field)
	}
}

func TestParseNames(t *testing.T) {
	tests := []struct {
		name string
		kind endpoints.Kind
		ns   string
		obj  string
		ok   bool
	}{
		{"namespaces/shop/pods/web-0", endpoints.KindPod, "shop", "web-0", true},
		{"namespaces/shop/workloads/vm.1", endpoints.KindExternalWorkload, "shop", "vm.1", true},
		{"namespaces/shop/services/web", "", "", "", false},
		{"namespaces/shop/pods/web-0/x", "", "", "", false},
		{"namespaces//pods/web-0", "", "", "", false},
		{"namespaces/shop/pods/Web", "", "", "", false},
		{"pods/web-0", "", "", "", false},
	}
	for _, tc := range tests {
		kind, ns, obj, err := parseMemberName("workload", tc.name)
		if !tc.ok {
			require.Error(t, err, tc.name)
			require.Equal(t, "workload", apierr.FieldViolations(err)[0].Field)
			continue
		}
		require.NoError(t, err, tc.name)
		require.Equal(t, []string{string(tc.kind), tc.ns, tc.obj}, []string{string(kind), ns, obj})
	}
}

func TestErrorTable(t *testing.T) {
	require.NoError(t, errorTable.Check())
}
