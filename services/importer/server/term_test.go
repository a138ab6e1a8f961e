package server

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/reconcile"
)

type leadership struct {
	mu      sync.Mutex
	leading bool
}

func (l *leadership) Leader() (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leading {
		return "me", true
	}
	return "other", false
}

func (l *leadership) set(leading bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leading = leading
}

type noImports struct{}

func (noImports) Status(exports.Key) (reconcile.Status, bool) { return reconcile.Status{}, false }
func (noImports) Keys(string) []exports.Key                   { return nil }

func push(ns, name, cluster, addr, requestID string) *importerv1.ApplyImportRequest {
	return &importerv1.ApplyImportRequest{RequestId: requestID, Endpoints: &membershipv1.ServiceEndpoints{
		Service: "namespaces/" + ns + "/services/" + name,
		Cluster: cluster,
		Ports:   []*membershipv1.ServicePort{{Name: "http", Port: 80}},
		Groups: []*membershipv1.EndpointGroup{{AddressType: membershipv1.AddressType_ADDRESS_TYPE_IPV4,
			Ports:     []*membershipv1.EndpointPort{{Name: "http", Port: 8080}},
			Endpoints: []*membershipv1.Endpoint{{Addresses: []string{addr}, Conditions: &membershipv1.EndpointConditions{Ready: true}}}}},
		Export: &membershipv1.ExportInfo{Exported: true},
	}}
}

// TestEndTermForgetsPushes: what a leader accepted through the push API
// does not outlive its term. Were it kept, a replica that leads again
// would bring back a service its pusher withdrew through the leader in
// between; and a retry of the same request id in the new term is stored
// again, not answered from the ended term.
func TestEndTermForgetsPushes(t *testing.T) {
	store := exports.New(nil)
	store.AddSource("watched")
	lead := &leadership{leading: true}
	s, err := New(Config{Imports: noImports{}, Store: store, Leader: lead, Synced: func() bool { return true }})
	require.NoError(t, err)
	ctx := context.Background()
	cart := exports.Key{Namespace: "shop", Name: "cart"}
	_, _, err = store.Upsert("watched", exports.OriginWatch, exports.Update{Endpoints: push("shop", "cart", "watched", "10.0.0.1", "").GetEndpoints()})
	require.NoError(t, err)

	_, err = s.ApplyImport(ctx, push("shop", "cart", "vm", "10.0.0.2", "r1"))
	require.NoError(t, err)
	svc, _ := store.Get(cart)
	require.Len(t, svc.Exports, 2)

	lead.set(false)
	_, err = s.ApplyImport(ctx, push("shop", "cart", "vm", "10.0.0.2", "r2"))
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "a replica that does not lead refuses pushes")
	require.Equal(t, 1, s.EndTerm())
	svc, _ = store.Get(cart)
	require.Len(t, svc.Exports, 1, "the push is forgotten, the watched export kept")
	require.Equal(t, "watched", svc.Exports[0].Cluster)

	// Leading again: nothing of the old term acts, and the retry is
	// stored anew.
	lead.set(true)
	_, ok := svc.Export("vm")
	require.False(t, ok)
	_, err = s.ApplyImport(ctx, push("shop", "cart", "vm", "10.0.0.2", "r1"))
	require.NoError(t, err)
	svc, _ = store.Get(cart)
	_, ok = svc.Export("vm")
	require.True(t, ok, "the retry of r1 was answered from the ended term and not stored")
}
