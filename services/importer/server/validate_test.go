package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/services/importer/exports"
)

func newTestServer(t testing.TB) (*Server, *exports.Store) {
	store := exports.New(nil)
	s, err := New(Config{Imports: noImports{}, Store: store, Leader: &leadership{leading: true}, Synced: func() bool { return true }})
	require.NoError(t, err)
	return s, store
}

// TestApplyImportRefusesWhatTheAPIServerWould: a push whose endpoints the
// API server would refuse in an EndpointSlice is refused with
// INVALID_ARGUMENT naming the field, and nothing is stored. Before, these
// were accepted and then froze the service's writes.
func TestApplyImportRefusesWhatTheAPIServerWould(t *testing.T) {
	ep := func(r *importerv1.ApplyImportRequest) *membershipv1.Endpoint {
		return r.GetEndpoints().GetGroups()[0].GetEndpoints()[0]
	}
	tests := []struct {
		name  string
		edit  func(*importerv1.ApplyImportRequest)
		field string
	}{
		{"loopback", func(r *importerv1.ApplyImportRequest) { ep(r).Addresses = []string{"127.0.0.1"} }, "endpoints.groups[0].endpoints[0].addresses[0]"},
		{"link-local", func(r *importerv1.ApplyImportRequest) { ep(r).Addresses = []string{"169.254.1.1"} }, "endpoints.groups[0].endpoints[0].addresses[0]"},
		{"unspecified", func(r *importerv1.ApplyImportRequest) { ep(r).Addresses = []string{"0.0.0.0"} }, "endpoints.groups[0].endpoints[0].addresses[0]"},
		{"hostname", func(r *importerv1.ApplyImportRequest) { ep(r).Hostname = "Bad_Host" }, "endpoints.groups[0].endpoints[0].hostname"},
		{"node name", func(r *importerv1.ApplyImportRequest) { ep(r).NodeName = "Node One" }, "endpoints.groups[0].endpoints[0].node_name"},
		{"nine zone hints", func(r *importerv1.ApplyImportRequest) {
			ep(r).Hints = &membershipv1.EndpointHints{ForZones: strings.Split("a,b,c,d,e,f,g,h,i", ",")}
		}, "endpoints.groups[0].endpoints[0].hints.for_zones"},
		{"duplicate port names in a group", func(r *importerv1.ApplyImportRequest) {
			g := r.GetEndpoints().GetGroups()[0]
			g.Ports = append(g.Ports, &membershipv1.EndpointPort{Name: "http", Port: 9090})
		}, "endpoints.groups[0].ports[1].name"},
		{"app protocol", func(r *importerv1.ApplyImportRequest) {
			r.GetEndpoints().GetGroups()[0].GetPorts()[0].AppProtocol = "not a protocol!"
		}, "endpoints.groups[0].ports[0].app_protocol"},
		{"port name", func(r *importerv1.ApplyImportRequest) { r.GetEndpoints().GetPorts()[0].Name = "HTTP_1" }, "endpoints.ports[0].name"},
		{"numeric port name", func(r *importerv1.ApplyImportRequest) { r.GetEndpoints().GetPorts()[0].Name = "8080" }, "endpoints.ports[0].name"},
		{"20-character port name", func(r *importerv1.ApplyImportRequest) {
			r.GetEndpoints().GetPorts()[0].Name = strings.Repeat("p", 20)
		}, "endpoints.ports[0].name"},
		{"numeric group port name", func(r *importerv1.ApplyImportRequest) {
			r.GetEndpoints().GetGroups()[0].GetPorts()[0].Name = "8080"
		}, "endpoints.groups[0].ports[0].name"},
		{"request id of 3 MB", func(r *importerv1.ApplyImportRequest) { r.RequestId = strings.Repeat("r", 3<<20) }, "request_id"},
		{"session affinity", func(r *importerv1.ApplyImportRequest) {
			r.GetEndpoints().GetExport().SessionAffinity = 99
		}, "endpoints.export.session_affinity"},
		{"session affinity timeout of 0", func(r *importerv1.ApplyImportRequest) {
			r.GetEndpoints().GetExport().SessionAffinity = membershipv1.SessionAffinity_SESSION_AFFINITY_CLIENT_IP
			r.GetEndpoints().GetExport().SessionAffinityTimeout = durationpb.New(0)
		}, "endpoints.export.session_affinity_timeout"},
		{"session affinity timeout over a day", func(r *importerv1.ApplyImportRequest) {
			r.GetEndpoints().GetExport().SessionAffinityTimeout = durationpb.New(25 * time.Hour)
		}, "endpoints.export.session_affinity_timeout"},
		{"internal traffic policy", func(r *importerv1.ApplyImportRequest) {
			r.GetEndpoints().GetExport().InternalTrafficPolicy = "Nearby"
		}, "endpoints.export.internal_traffic_policy"},
		{"traffic distribution", func(r *importerv1.ApplyImportRequest) {
			r.GetEndpoints().GetExport().TrafficDistribution = "Anywhere"
		}, "endpoints.export.traffic_distribution"},
		{"exported label", func(r *importerv1.ApplyImportRequest) {
			r.GetEndpoints().GetExport().ExportedLabels = map[string]string{"bad key!": "x"}
		}, "endpoints.export.exported_labels[bad key!]"},
		{"too many exported labels", func(r *importerv1.ApplyImportRequest) {
			m := map[string]string{}
			for i := range 100 {
				m[fmt.Sprint("k", i)] = "v"
			}
			r.GetEndpoints().GetExport().ExportedLabels = m
		}, "endpoints.export"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, store := newTestServer(t)
			req := push("shop", "cart", "vm", "10.0.0.2", "")
			tc.edit(req)
			_, err := s.ApplyImport(context.Background(), req)
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
			require.Equal(t, ReasonInvalidArgument, apierr.Reason(err))
			var fields []string
			for _, f := range apierr.FieldViolations(err) {
				fields = append(fields, f.Field)
			}
			require.Contains(t, fields, tc.field)
			require.Zero(t, store.Len(), "nothing is stored")
		})
	}

	// Addresses the API server takes are taken; IPv6 in any spelling.
	s, store := newTestServer(t)
	req := push("shop", "cart", "vm", "10.0.0.2", "")
	req.GetEndpoints().Groups = append(req.GetEndpoints().Groups, &membershipv1.EndpointGroup{
		AddressType: membershipv1.AddressType_ADDRESS_TYPE_IPV6,
		Endpoints:   []*membershipv1.Endpoint{{Addresses: []string{"FD00::0A"}}},
	})
	_, err := s.ApplyImport(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, 1, store.Len())
}

// FuzzApplyImportValidation: whatever a client sends, validation answers
// INVALID_ARGUMENT or accepts; it never panics and its message is bounded.
func FuzzApplyImportValidation(f *testing.F) {
	seed, _ := proto.Marshal(push("shop", "cart", "vm", "10.0.0.2", "r"))
	f.Add(seed)
	bad := push("shop", "cart", "vm", "127.0.0.1", "r")
	bad.GetEndpoints().GetGroups()[0].GetEndpoints()[0].Hostname = strings.Repeat("X", 300)
	seed, _ = proto.Marshal(bad)
	f.Add(seed)
	s, _ := newTestServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req importerv1.ApplyImportRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		err := s.validateApply(&req)
		if err == nil {
			return
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("code %v: %v", status.Code(err), err)
		}
		if n := len(status.Convert(err).Message()); n > 64<<10 {
			t.Fatalf("message of %d bytes", n)
		}
	})
}

// TestWithdrawForgetsRequestIDs: after a withdrawal, a push with the request
// id of the withdrawn one is stored again instead of being answered from
// the log (which silently did nothing); and errors carry no raw newline.
func TestWithdrawForgetsRequestIDs(t *testing.T) {
	s, store := newTestServer(t)
	ctx := context.Background()
	_, err := s.ApplyImport(ctx, push("shop", "cart", "vm", "10.0.0.2", "r1"))
	require.NoError(t, err)
	_, err = s.WithdrawImport(ctx, &importerv1.WithdrawImportRequest{Service: "namespaces/shop/services/cart", Cluster: "vm"})
	require.NoError(t, err)
	require.Zero(t, store.Len())
	_, err = s.ApplyImport(ctx, push("shop", "cart", "vm", "10.0.0.2", "r1"))
	require.NoError(t, err)
	require.Equal(t, 1, store.Len(), "the re-push is stored")

	_, err = s.WithdrawImport(ctx, &importerv1.WithdrawImportRequest{Service: "namespaces/shop/services/cart", Cluster: "other"})
	require.Equal(t, codes.NotFound, status.Code(err))
	require.NotContains(t, status.Convert(err).Message(), "\n")
}
